"""Another user squats a kernel's names in a shared, sticky runtime dir (``/tmp`` or a course's
``JUPYTER_RUNTIME_DIR``): they see ``kernel-<id>.json`` appear and plant something at
``jupyter_gpu-kernel-<id>.json`` and ``jupyter_gpu-cells-<id>.json`` before the notebook loads
jupyter_gpu. The sticky bit lets the kernel neither replace nor remove what they planted, so it
once fell silent and every view said "not reported (%load_ext jupyter_gpu in it)". Now it
publishes under a private name and still reports; where it cannot, the server and
``jupyter gpu status`` say "refused: a file of another user holds this kernel's name".

The attacker runs as a second uid (``tests/support/other_user.py``). The victim is this test's
user, root, whose CAP_FOWNER would override the sticky bit: its kernels run without it, in a
shared dir owned by neither, so they meet the sticky bit as an ordinary user does in /tmp.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import gpu_status
from support.fake_torch import FAKE_TORCH_THEN_LOAD, fixture_stats
from support.jupyter_api import gpu_reply, start_notebook_kernel
from support.kernel_client import CellRunner
from support.other_user import attacker_uid, run_as_attacker
from support.waiting import wait_for

TAKEN = "a file of another user holds this kernel's name"
NOBODY = 65534
CAP_FOWNER = 3  # linux/capability.h

# What the attacker runs: every kernel it sees in the runtime dir gets its jupyter_gpu names
# taken, by a forged file (world-readable, claiming figures), a folder, or a link to a victim file.
PLANT = """
import json, os, sys, time
runtime, kind, target = sys.argv[1], sys.argv[2], sys.argv[3]
for entry in os.listdir(runtime):
    if not (entry.startswith("kernel-") and entry.endswith(".json")):
        continue
    kernel_id = entry[len("kernel-"):-len(".json")]
    for name in (f"jupyter_gpu-kernel-{kernel_id}.json", f"jupyter_gpu-cells-{kernel_id}.json"):
        path = os.path.join(runtime, name)
        if kind == "file":
            forged = {"version": 1, "kernel_id": kernel_id, "pid": 1, "time": time.time(),
                      "cuda_in_use": True, "devices": [], "cells": []}
            with open(path, "w") as handle:
                json.dump(forged, handle)
            os.chmod(path, 0o644)
        elif kind == "folder":
            os.mkdir(path, 0o755)
        else:
            os.symlink(target, path)
        print(name)
"""


@pytest.fixture
def jp_runtime_dir() -> Iterator[Path]:
    """The server's runtime dir, shared like /tmp: anyone may create files, nobody may remove
    another's (mode 1777), and it belongs to neither the victim nor the attacker."""
    attacker_uid()  # skips (or fails where required) before a server starts for nothing
    path = Path(tempfile.mkdtemp(prefix="jgpu-shared-runtime-", dir="/tmp"))
    path.chmod(0o1777)
    os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kernel(jp_data_dir: Path) -> str:
    """A python3 kernel spec whose kernels lack CAP_FOWNER: the sticky bit holds for them."""
    spec = jp_data_dir / "kernels" / "python3-no-fowner"
    spec.mkdir(parents=True)
    argv = ["setpriv", "--bounding-set=-fowner", "--inh-caps=-fowner", sys.executable]
    argv += ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"})
    )
    return spec.name


async def plant(runtime: Path, kind: str, target: Path | None = None) -> list[Path]:
    """The attack, as the second uid; the paths it took, checked to be the attacker's."""
    done = await asyncio.to_thread(run_as_attacker, PLANT, args=(str(runtime), kind, str(target or "")))
    assert done.returncode == 0, done.stderr
    planted = [runtime / name for name in done.stdout.split()]
    assert planted and all(os.lstat(p).st_uid == attacker_uid() for p in planted)
    return planted


def fingerprint(paths: list[Path]) -> list[tuple[int, int, int, str]]:
    """What the attacker left at each path, to show that nothing of ours replaced or wrote it."""
    prints = []
    for path in paths:
        info = os.lstat(path)
        content = os.readlink(path) if path.is_symlink() else "" if path.is_dir() else path.read_text()
        prints.append((info.st_ino, info.st_uid, info.st_mode, content))
    return prints


def url_and_token(jp_serverapp: Any, jp_http_port: int, jp_base_url: str) -> tuple[str, str]:
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}", jp_serverapp.identity_provider.token


async def kernel_row(jp_fetch: Any, kernel_id: str) -> dict[str, Any]:
    body = await gpu_reply(jp_fetch, "kernels", schema="kernels.schema.json")
    return next(k for k in body["kernels"] if k["id"] == kernel_id)


async def reports_despite_the_squatter(
    jp_fetch: Any, jp_serverapp: Any, server: tuple[str, str], planted: list[Path], kernel_id: str
) -> None:
    """The notebook loads jupyter_gpu after the attack: its figures and cells reach the server
    and ``jupyter gpu status``, the attacker's things stay as they were, and unloading leaves no
    file of the kernel behind."""
    runtime = Path(jp_serverapp.runtime_dir)
    before = fingerprint(planted)
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    [capabilities] = re.findall(
        r"^CapEff:\s*(\w+)$", Path(f"/proc/{kernel.provisioner.pid}/status").read_text(), re.M
    )
    assert not int(capabilities, 16) & 1 << CAP_FOWNER, (
        "the kernel overrides the sticky bit: this proves nothing"
    )
    async with CellRunner(kernel) as cells:
        assert (await cells.run(FAKE_TORCH_THEN_LOAD)).status == "ok"
        assert (await cells.run("x = 1", "after-the-attack")).status == "ok"

        async def figures() -> dict[str, Any] | None:
            row = await kernel_row(jp_fetch, kernel_id)
            return row if row["allocator_state"] == "ok" else None

        row = await wait_for(figures, 30, what="the kernel's allocator figures")
        assert row["allocator"]["pid"] == kernel.provisioner.pid
        [device] = row["allocator"]["devices"]
        assert device["allocated_bytes"] == fixture_stats()["allocated_bytes.all.current"]

        async def the_cell() -> dict[str, Any] | None:
            body = await gpu_reply(jp_fetch, "kernels", kernel_id, "cells", schema="cells.schema.json")
            return body if body["cells"] else None

        timeline = await wait_for(the_cell, 30, what="the kernel's cell in its timeline")
        assert timeline["reason"] is None
        assert [c["cell_id"] for c in timeline["cells"]] == ["after-the-attack"]
        assert timeline["cells"][0]["pid"] == kernel.provisioner.pid
        status = json.loads(await gpu_status(*server, "--json"))
        [listed] = [k for k in status["kernels"] if k["id"] == kernel_id]
        assert listed["allocator_state"] == "ok"
        assert listed["allocator"]["devices"][0]["allocated_bytes"] == device["allocated_bytes"]
        [line] = [line for line in (await gpu_status(*server)).splitlines() if "shared/lesson.ipynb" in line]
        assert "GPU 0: " in line and "not reported" not in line and "refused" not in line
        assert fingerprint(planted) == before
        assert (await cells.run("%unload_ext jupyter_gpu")).status == "ok"
    mine = [p.name for p in runtime.iterdir() if p.name.startswith("jupyter_gpu") and p not in planted]
    assert mine == [], "the kernel's own files outlived %unload_ext"
    assert fingerprint(planted) == before


@pytest.mark.parametrize("kind", ["file", "folder"])
async def test_a_kernel_whose_names_are_taken_still_reports(
    jp_fetch, jp_serverapp, jp_runtime_dir, jp_http_port, jp_base_url, kernel_env, kernel, kind
):
    kernel_id = await start_notebook_kernel(jp_fetch, "shared/lesson.ipynb", kernel)
    planted = await plant(jp_runtime_dir, kind)
    assert {p.name for p in planted} == {
        f"jupyter_gpu-kernel-{kernel_id}.json",
        f"jupyter_gpu-cells-{kernel_id}.json",
    }
    server = url_and_token(jp_serverapp, jp_http_port, jp_base_url)
    await reports_despite_the_squatter(jp_fetch, jp_serverapp, server, planted, kernel_id)


async def test_a_link_to_a_victim_file_is_neither_followed_nor_replaced(
    jp_fetch, jp_serverapp, jp_runtime_dir, jp_http_port, jp_base_url, tmp_path, kernel_env, kernel
):
    """Links at both names to the victim's notebook: the kernel writes neither through them
    (protected_symlinks is off on some machines) nor in their place, and still reports."""
    victim = tmp_path / "thesis.ipynb"
    victim.write_text('{"cells": ["months of work"]}')
    victim_before = (victim.stat().st_ino, victim.read_text())
    kernel_id = await start_notebook_kernel(jp_fetch, "shared/lesson.ipynb", kernel)
    planted = await plant(jp_runtime_dir, "symlink", victim)
    assert all(os.readlink(p) == str(victim) for p in planted)
    server = url_and_token(jp_serverapp, jp_http_port, jp_base_url)
    await reports_despite_the_squatter(jp_fetch, jp_serverapp, server, planted, kernel_id)
    await jp_serverapp.kernel_manager.shutdown_kernel(kernel_id)
    assert (victim.stat().st_ino, victim.read_text()) == victim_before


async def test_a_kernel_that_cannot_report_says_its_name_is_taken(
    jp_fetch, jp_serverapp, jp_runtime_dir, jp_http_port, jp_base_url, kernel
):
    """The names of a notebook that has not loaded jupyter_gpu (so has no file of its own): the
    API, the timeline and ``jupyter gpu status`` say it is refused, not "load it"."""
    kernel_id = await start_notebook_kernel(jp_fetch, "shared/untouched.ipynb", kernel)
    await plant(jp_runtime_dir, "file")
    row = await kernel_row(jp_fetch, kernel_id)
    assert row["allocator"] is None
    assert (row["allocator_state"], row["allocator_reason"]) == ("refused", TAKEN)
    timeline = await gpu_reply(jp_fetch, "kernels", kernel_id, "cells", schema="cells.schema.json")
    assert timeline["reason"] == TAKEN and timeline["cells"] == []

    url, token = url_and_token(jp_serverapp, jp_http_port, jp_base_url)
    status = json.loads(await gpu_status(url, token, "--json"))
    [kernel] = [k for k in status["kernels"] if k["id"] == kernel_id]
    assert (kernel["allocator_state"], kernel["allocator_reason"]) == ("refused", TAKEN)
    text = await gpu_status(url, token)
    [line] = [line for line in text.splitlines() if "shared/untouched.ipynb" in line]
    assert line.rstrip().endswith(f"refused: {TAKEN}")
    assert "not reported" not in text
