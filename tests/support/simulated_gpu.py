"""Processes on a simulated GPU (NVML replaying the two-H200 readings): in the test's own
process, and a real kernel of the test server with a child. A pytest plugin, listed in
tests/conftest.py, for its fixtures ``other_process``, ``nvml`` and ``children``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from jupyter_gpu.kernel import gpu_memory
from jupyter_gpu.nvml.simulated import SimulatedNVML
from support.jupyter_api import start_notebook_kernel
from support.kernel_client import run_cell
from support.paths import READINGS

GIB = 1024**3


@pytest.fixture
def other_process() -> Iterator[psutil.Process]:
    """A live process, not our descendant, that NVML will say holds 100 GiB of GPU 0.

    Started through a shell that exits at once, so it is nobody's child here: children of a
    kernel count as that kernel.
    """
    out = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(120)' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    proc = psutil.Process(int(out.stdout))
    yield proc
    proc.kill()


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch, other_process: psutil.Process) -> SimulatedNVML:
    """The kernel side's NVML for this test: GPU 0 held by this process and ``other_process``."""
    readings = json.loads(READINGS.read_text())
    readings["devices"][0]["compute_processes"] = [
        {"pid": os.getpid(), "used_gpu_memory": 3_212_836_864},
        {"pid": other_process.pid, "used_gpu_memory": 100 * GIB},
    ]
    sim = SimulatedNVML(readings)
    monkeypatch.setattr(gpu_memory, "nvml_backend", lambda: sim)
    return sim


@pytest.fixture
def children() -> Iterator[list[int]]:
    """PIDs of processes a test made a kernel start; killed afterwards."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


async def spawn_child_in_kernel(kernel: Any) -> int:
    """Make the kernel start a child process (like a DataLoader worker) and return its PID."""
    code = "import subprocess; _child = subprocess.Popen(['sleep', '120']); print(_child.pid)"
    return int(await run_cell(kernel, code))


async def kernel_on_gpu(jp_fetch: Any, gpu_monitor: Any, children: list[int]) -> tuple[str, int, int]:
    """A real kernel of this server whose process and child hold memory on simulated GPU 1:
    its id, its pid and the child's."""
    kernel_id = await start_notebook_kernel(jp_fetch, "course/week1/train.ipynb")
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    child = await spawn_child_in_kernel(kernel)
    children.append(child)
    processes = gpu_monitor.simulated_nvml.readings["devices"][1]["compute_processes"]
    processes.append({"pid": kernel.provisioner.pid, "used_gpu_memory": 2 * GIB})
    processes.append({"pid": child, "used_gpu_memory": 1 * GIB})
    processes.append({"pid": os.getpid(), "used_gpu_memory": 3 * GIB})  # not a kernel: this test
    return kernel_id, kernel.provisioner.pid, child


def hold(gpu_monitor: Any, kernel_id: str, gpu_index: int, nbytes: int) -> None:
    """The kernel's process now holds ``nbytes`` on a simulated GPU."""
    pid = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    processes = gpu_monitor.simulated_nvml.readings["devices"][gpu_index]["compute_processes"]
    processes.append({"pid": pid, "used_gpu_memory": nbytes})
