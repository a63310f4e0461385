"""GPU memory seen from inside a kernel: NVML's holders (``nvml.holders``) over the kernel
side's one NVML backend, this kernel's allocator, and the Jupyter server for which notebook a
process belongs to.

Used by ``%gpu_mem``, ``%gpu_monitor`` and the out-of-memory explanation, i.e. on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pynvml

from ..analysis.fragmentation import AllocatorFigures, allocator_figures, summarize_snapshot
from ..client import ServerError, discover
from ..nvml import holders
from ..nvml.mig import bare_uuid
from ..torch_state import snapshot_segments

# Tests swap in jupyter_gpu.nvml.simulated; everywhere else this is the real pynvml module.
nvml_backend: Callable[[], Any] = lambda: pynvml  # noqa: E731
SERVER_TIMEOUT = 2.0


def device_view(
    uuid: str, *, labels: Callable[[], dict[int, str]] = dict
) -> tuple[holders.DeviceView | None, str | None]:
    """``holders.device_view`` through this kernel's NVML backend, counting as this kernel's the
    NVML process its agent matched it to (in a container NVML may number it otherwise)."""
    from .agent import own_nvml_pid

    matched = own_nvml_pid()
    return holders.device_view(
        uuid, nvml_backend(), labels=labels, also_own=() if matched is None else (matched,)
    )


def all_devices() -> tuple[list[dict[str, Any]], str | None]:
    """``holders.all_devices`` through this kernel's NVML backend."""
    return holders.all_devices(nvml_backend())


def allocator_view(
    torch: ModuleType, device: int, *, with_snapshot: bool = True
) -> tuple[AllocatorFigures, list[dict[str, Any]] | None]:
    """This kernel's allocator figures for one device, and its snapshot segments if asked."""
    segments = None
    if with_snapshot:
        segments = [s for s in snapshot_segments(torch) if s.get("device", 0) == device]
    summary = summarize_snapshot(segments, device) if segments is not None else None
    return allocator_figures(torch.cuda.memory_stats(device), summary), segments


def server_labels(uuid: str) -> dict[int, str]:
    """PID → "notebook <path>" for kernels of this kernel's Jupyter server on that GPU.

    Asks ``GET {server}api/gpu/kernels`` of the first server ``client.discover`` lists (the one
    that started this kernel, when there is one), which maps NVML processes (children included)
    to kernels and sessions; empty when there is no such server or it cannot be asked.
    """
    servers = discover()
    if not servers:
        return {}
    try:
        data = servers[0].get("api/gpu/kernels", timeout=SERVER_TIMEOUT)
    except ServerError:
        return {}
    labels: dict[int, str] = {}
    want = bare_uuid(uuid)  # the server spells a MIG device's UUID as NVML does, torch otherwise
    for kernel in _list(data.get("kernels")):
        if not isinstance(kernel, dict):
            continue
        name = f"notebook {kernel['path']}" if kernel.get("path") else f"kernel {kernel.get('id')}"
        for row in _list(kernel.get("gpu_memory")):
            if isinstance(row, dict) and isinstance(row.get("uuid"), str) and bare_uuid(row["uuid"]) == want:
                labels.update({pid: name for pid in _list(row.get("pids")) if isinstance(pid, int)})
    return labels


def _list(value: Any) -> list[Any]:
    """The server's reply is checked like any input: a list where one is expected, else nothing."""
    return value if isinstance(value, list) else []
