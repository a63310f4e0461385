"""On a real GPU: a Jupyter server and its kernels in a PID namespace of their own (``unshare
--pid --fork --mount-proc``, as in a container). Where NVML reports the host's PIDs, which
nothing in there has, each kernel finds its own NVML process; where the driver translates them
into the caller's namespace (driver 580 on the H200 does), each kernel finds itself under its own
PID. Either way the server gives each notebook the memory nvidia-smi, outside, gives the kernel's
host process, and an out-of-memory error names the notebook that holds the rest."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking import BlockingKernelClient
from support.browser import LabServer
from support.kernel_client import run
from support.machine import nvidia_smi

from jupyter_gpu.analysis.stats_file import file_name

pytestmark = pytest.mark.gpu

GIB = 2**30
NOTEBOOKS = {"two.ipynb": 2, "four.ipynb": 4}  # GiB each allocates


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    lab = LabServer(
        tmp_path_factory.mktemp("pidns"),
        app="jupyter_server",
        gpu={"backend": "nvml", "interval": 0.5},
        prefix=("unshare", "--pid", "--fork", "--mount-proc"),
    )
    yield lab
    lab.stop()


def in_namespace(host_pid: int) -> int | None:
    """The PID the innermost namespace gives a host process (``NSpid``'s last field)."""
    try:
        status = Path(f"/proc/{host_pid}/status").read_text()
    except OSError:
        return None
    line = next((row for row in status.splitlines() if row.startswith("NSpid:")), "")
    return int(line.split()[-1]) if line else None


def agent_says(server: LabServer, kernel_id: str, states: set[str], timeout: float = 30) -> dict[str, Any]:
    """The kernel's stats file once its agent's ``nvml_match`` is one of ``states``."""
    path = server.tmp / "runtime" / file_name(kernel_id)
    deadline = time.monotonic() + timeout
    while True:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):  # not written yet, or being replaced
            doc = {}
        if doc.get("nvml_match") in states:
            return doc
        assert time.monotonic() < deadline, f"{kernel_id}: the agent said {doc.get('nvml_match')!r}"
        time.sleep(0.2)


def test_each_notebook_gets_the_memory_nvidia_smi_gives_its_host_process(server: LabServer) -> None:
    kernels: dict[str, str] = {}
    clients: dict[str, BlockingKernelClient] = {}
    try:
        for path, gib in NOTEBOOKS.items():
            kernel_id = server.start_notebook_kernel(path)
            clients[kernel_id] = server.kernel_client(kernel_id)
            kernels[kernel_id] = path
            # one cell, as people write it: the agent has no list from before the context
            cell = run(
                clients[kernel_id],
                f"%load_ext jupyter_gpu\nimport torch\nx = torch.empty({gib} * 2**30, dtype=torch.uint8, device='cuda')",
            )
            assert cell.ok, cell.traceback
        for kernel_id in kernels:  # both contexts exist: neither can tell which process it is
            agent_says(server, kernel_id, {"ambiguous", "matched", "same_namespace"})
        for kernel_id in kernels:  # one allocation each, in turn: the memory moves with one allocator
            assert run(clients[kernel_id], "y = torch.empty(2**30, dtype=torch.uint8, device='cuda')").ok
            found = agent_says(server, kernel_id, {"matched", "same_namespace"})
            if found["nvml_match"] == "matched":
                assert found["nvml_pid"] != found["pid"]  # the host's number, not the namespace's

        deadline = time.monotonic() + 60
        while True:
            reply: dict[str, Any] = server.api("GET", "api/gpu/kernels")
            held = {k["id"]: k["gpu_memory"] for k in reply["kernels"] if k["id"] in kernels}
            # the sample after both allocations (the kernels hold still from then on)
            if all(
                held.get(kernel_id) and held[kernel_id][0]["used_memory_bytes"] >= (NOTEBOOKS[path] + 1) * GIB
                for kernel_id, path in kernels.items()
            ):
                break
            assert time.monotonic() < deadline, f"not attributed within 60 s: {reply}"
            time.sleep(0.5)
        smi = {int(pid): int(mib) * 2**20 for pid, mib in nvidia_smi("pid,used_memory", "compute-apps")}
        inside = {in_namespace(pid): pid for pid in smi}  # the server's PID -> the host's
        for kernel_id, rows in held.items():
            (row,) = rows
            (pid,) = row["pids"]
            host = pid if pid in smi else inside.get(pid)
            assert host in smi, f"{kernels[kernel_id]}: {pid} is no process nvidia-smi lists ({smi})"
            assert abs(row["used_memory_bytes"] - smi[host]) <= 0.02 * smi[host], (
                kernels[kernel_id],
                row,
                smi,
            )
        assert len({rows[0]["pids"][0] for rows in held.values()}) == 2  # two processes, told apart

        # an out-of-memory error in one notebook names the other as holding its memory
        two = next(k for k, path in kernels.items() if path == "two.ipynb")
        oom = run(clients[two], "z = torch.empty(400 * 2**30, dtype=torch.uint8, device='cuda')")
        assert not oom.ok and "OutOfMemoryError" in oom.traceback
        explanation = oom.stream()
        assert "jupyter_gpu: why CUDA ran out of memory" in explanation, explanation
        assert re.search(r"\d+\.\d+ GiB  notebook four\.ipynb", explanation), explanation
        assert "notebook two.ipynb" not in explanation, explanation  # itself is not "another process"
    finally:
        for client in clients.values():
            client.stop_channels()
