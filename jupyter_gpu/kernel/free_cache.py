"""The ``jupyter_gpu.free_cache`` comm target: the server asks the kernel to give PyTorch's cached
GPU memory back to the driver, through the kernel's own messaging, never by injecting code.

A comm message is handled on the shell channel between cells, so the kernel is idle whenever it
runs (the server asks only kernels that are idle, and a request that arrives while a cell runs
waits for the cell to end). It calls ``torch.cuda.empty_cache()`` only when the user's code has
already imported torch and initialised CUDA: it never imports torch and never creates a CUDA
context. It replies with one message, then closes the comm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from ..torch_state import torch_in_use

TARGET = "jupyter_gpu.free_cache"


def free_cache() -> dict[str, Any]:
    """Empty PyTorch's cache if CUDA is in use; what each device held before and after."""
    torch = torch_in_use()
    if torch is None:
        return {
            "cuda_in_use": False,
            "freed_bytes": 0,
            "devices": [],
            "reason": "PyTorch has not initialised CUDA in this kernel: it holds no cached GPU memory.",
        }
    indices = range(torch.cuda.device_count())
    before = [torch.cuda.memory_reserved(i) for i in indices]
    torch.cuda.empty_cache()
    devices = [
        {
            "index": i,
            "reserved_before_bytes": before[i],
            "reserved_after_bytes": torch.cuda.memory_reserved(i),
            "allocated_bytes": torch.cuda.memory_allocated(i),
        }
        for i in indices
    ]
    freed = sum(d["reserved_before_bytes"] - d["reserved_after_bytes"] for d in devices)
    return {"cuda_in_use": True, "freed_bytes": max(0, freed), "devices": devices, "reason": None}


def _open(comm: Any, msg: dict[str, Any]) -> None:
    try:
        reply = free_cache()
    except Exception as error:  # a failed call is an answer, not a traceback in the kernel log
        reply = {
            "cuda_in_use": True,
            "freed_bytes": 0,
            "devices": [],
            "reason": f"empty_cache failed: {error}",
        }
    comm.send(reply)
    comm.close()


def register(ipython: InteractiveShell) -> Callable[[], None]:
    """Register the comm target on the kernel; a plain IPython shell has no comms: nothing to do."""
    manager = getattr(getattr(ipython, "kernel", None), "comm_manager", None)
    if manager is None:
        return lambda: None
    manager.register_target(TARGET, _open)
    return lambda: manager.unregister_target(TARGET, _open)
