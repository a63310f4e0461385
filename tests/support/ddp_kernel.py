"""A real ipykernel for the ddp tests, driven through jupyter_client like a notebook would; the
ranks and helpers it starts; and the fixtures ``ddp_kernel`` and ``gpu_kernel`` (a pytest plugin,
listed in tests/conftest.py)."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

from support.paths import ROOT

# A cell that prints the outcome and ranks of the kernel's last timeline record (the timeline
# registered in the kernel first).
LAST_RECORD = (
    "import json\nfrom jupyter_gpu.kernel.timeline import timeline_of\n"
    "_last = timeline_of(get_ipython()).cells()[-1]\n"
    "print(json.dumps([_last['outcome'], _last['ranks']]))"
)


class Kernel:
    """A kernel with jupyter_gpu's ddp magics loaded; collects every iopub message it sends."""

    def __init__(self, **extra_env: str) -> None:
        env = dict(os.environ, **extra_env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.km, self.kc = start_new_kernel(kernel_name="python3", env=env, startup_timeout=60)
        self.iopub: list[dict[str, Any]] = []
        self.pid: int = self.km.provisioner.pid
        self.run("from jupyter_gpu.kernel.ddp.magics import register; register(get_ipython())")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def submit(self, code: str) -> str:
        return self.kc.execute(code, store_history=True)

    def wait(self, msg_id: str, timeout: float = 120) -> list[dict[str, Any]]:
        """Read iopub until ``msg_id`` is idle; return that cell's messages."""
        deadline = time.monotonic() + timeout
        while not any(
            m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
            and m["parent_header"].get("msg_id") == msg_id
            for m in self.iopub
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"cell {msg_id} still running after {timeout} s")
            try:
                self.iopub.append(self.kc.get_iopub_msg(timeout=min(remaining, 1)))
            except queue.Empty:
                pass
        return self.messages(msg_id)

    def pump(self, seconds: float) -> None:
        """Collect iopub messages for a while (output that arrives between cells)."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                self.iopub.append(self.kc.get_iopub_msg(timeout=remaining))
            except queue.Empty:
                pass

    def messages(self, msg_id: str) -> list[dict[str, Any]]:
        return [m for m in self.iopub if m["parent_header"].get("msg_id") == msg_id]

    def run(self, code: str, timeout: float = 120) -> Cell:
        msg_id = self.submit(code)
        self.wait(msg_id, timeout)
        return Cell(self, msg_id)

    def wait_for_text(self, msg_id: str, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in Cell(self, msg_id).stdout:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} never appeared; got {Cell(self, msg_id).stdout!r}")
            self.pump(0.1)


class Cell:
    def __init__(self, kernel: Kernel, msg_id: str) -> None:
        self.kernel, self.msg_id = kernel, msg_id

    def _text(self, name: str) -> str:
        return "".join(
            m["content"]["text"]
            for m in self.kernel.messages(self.msg_id)
            if m["msg_type"] == "stream" and m["content"]["name"] == name
        )

    @property
    def stdout(self) -> str:
        return self._text("stdout")

    @property
    def stderr(self) -> str:
        return self._text("stderr")

    @property
    def error(self) -> dict[str, Any] | None:
        errors = [m["content"] for m in self.kernel.messages(self.msg_id) if m["msg_type"] == "error"]
        return errors[0] if errors else None

    @property
    def traceback(self) -> str:
        return "\n".join(self.error["traceback"]) if self.error else ""

    def value(self) -> str:
        results = [
            m["content"]["data"]["text/plain"]
            for m in self.kernel.messages(self.msg_id)
            if m["msg_type"] == "execute_result"
        ]
        return results[0] if results else ""


_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def helper_processes(pid: int) -> list[str]:
    """Command lines of the kernel's forkserver and resource tracker."""
    found = []
    for child in psutil.Process(pid).children():
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.NoSuchProcess:
            continue
        if any(h in cmdline for h in _HELPERS):
            found.append(cmdline)
    return found


def rank_processes(pid: int) -> list[psutil.Process]:
    """Descendants of the kernel except multiprocessing's forkserver and resource tracker: the
    ranks, and on one node the process that serves their store.

    Ranks forked by the forkserver share its command line, so only the kernel's direct
    children are matched against it.
    """
    helpers = set()
    for child in psutil.Process(pid).children():
        try:
            if any(h in " ".join(child.cmdline()) for h in _HELPERS):
                helpers.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return [
        p for p in psutil.Process(pid).children(recursive=True) if p.pid not in helpers and _running(p.pid)
    ]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Pids still running (zombies count as gone) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def no_ranks_left(pid: int, timeout: float = 5) -> bool:
    """Whether every rank of the kernel is gone within ``timeout`` (teardown may finish late)."""
    deadline = time.monotonic() + timeout
    while rank_processes(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="session")
def ddp_kernel() -> Iterator[Kernel]:
    """One kernel for all ddp test modules: its forkserver is warm after the first launch."""
    kernel = Kernel()
    yield kernel
    kernel.close()


def cuda_devices() -> int:
    """GPUs torch sees here (0 without a CUDA build): what the ``gpu`` ddp tests need."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


@pytest.fixture(scope="module")
def gpu_kernel() -> Iterator[Kernel]:
    """A kernel that has used CUDA itself before any launch, as after %gpu_warmup.

    Its forkserver is not started at load time, so it is started after the kernel used CUDA.
    """
    kernel = Kernel(JUPYTER_GPU_DDP_PRESTART="0")
    cell = kernel.run("import torch\ntorch.zeros(1, device='cuda')\nprint(torch.cuda.is_initialized())")
    assert cell.stdout.strip() == "True", cell.traceback
    yield kernel
    kernel.close()
