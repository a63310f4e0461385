"""A Jupyter server in a container's memory limit (a real memory cgroup, as root): it reports the
limit, and a kernel the out-of-memory killer ends is listed as such, with the limit and the
notebook, instead of JupyterLab's bare "The kernel appears to have died"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser import LabServer
from support.jupyter_api import check_reply
from support.kernel_client import run
from support.memory_cgroup import entering, memory_cgroup
from support.waiting import wait_until

from jupyter_gpu.analysis.cells import cells_file_name
from jupyter_gpu.analysis.units import format_bytes

LIMIT = 3 * 2**29  # 1.5 GiB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    with memory_cgroup(LIMIT) as (procs, _version):
        lab = LabServer(tmp_path_factory.mktemp("limited"), prefix=entering(procs))
        try:
            yield lab
        finally:
            lab.stop()


def running_cell(timeline: Path) -> int | None:
    """The execution count the kernel's timeline file says is running."""
    try:
        running = json.loads(timeline.read_text()).get("running")
    except (OSError, ValueError):  # not written yet, or being replaced
        return None
    return running and running["execution_count"]


def test_the_server_reports_the_containers_memory_limit(server: LabServer) -> None:
    host = server.api("GET", "api/gpu/host")
    check_reply("host", host)
    assert host["memory"]["limit_bytes"] == LIMIT
    assert 0 < host["memory"]["usage_bytes"] < LIMIT
    assert host["memory"]["oom_kills"] == 0 and "memory" not in host["unavailable"]


def test_a_kernel_over_the_limit_is_listed_as_killed_by_the_oom_killer(server: LabServer) -> None:
    kernel_id = server.start_notebook_kernel("course/week3/train.ipynb")
    client = server.kernel_client(kernel_id)
    timeline = server.tmp / "runtime" / cells_file_name(kernel_id)
    gate = server.tmp / "allocate"
    try:
        assert run(client, "%load_ext jupyter_gpu").ok
        # cell [2] waits for the gate, so that the test knows it is running before it allocates
        client.execute(
            f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.02)\n"
            "hog = b'x' * (3 * 2**30)"  # 3 GiB, written: resident, over the limit
        )
        wait_until("the timeline to say cell [2] runs", lambda: running_cell(timeline) == 2, timeout=30)
        gate.touch()

        def listed() -> list[dict[str, Any]]:
            return server.api("GET", "api/gpu/exits")["exits"]

        (died,) = wait_until("the killed kernel in api/gpu/exits", listed, timeout=120)
    finally:
        client.stop_channels()
    check_reply("exits", {"version": 1, "exits": [died]})
    assert died["kernel_id"] == kernel_id and died["path"] == "course/week3/train.ipynb"
    assert died["cause"] == "oom_killed", died
    assert died["detail"].startswith(
        f"the kernel was killed by the out-of-memory killer: the container's limit is {format_bytes(LIMIT)}"
    )
    assert died["last_cell"] == 2 and died["detail"].endswith(" while cell [2] ran")
    host = server.api("GET", "api/gpu/host")
    assert host["memory"]["oom_kills"] >= 1
    assert "course/week3/train.ipynb: the kernel was killed by the out-of-memory killer" in server.log()
