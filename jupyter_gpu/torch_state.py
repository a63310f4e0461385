"""Look at the user's torch without importing it or initialising CUDA.

Everything here returns None until the user's own code has imported torch and initialised
CUDA; only then do the calls that need an initialised CUDA state run.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .analysis.cells import DeviceReading


def torch_in_use() -> ModuleType | None:
    """torch, if the user's code imported it and initialised CUDA; never imports anything."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None  # absent, or another thread is still importing it
    cuda = getattr(torch, "cuda", None)
    try:
        return torch if cuda is not None and cuda.is_initialized() else None
    except Exception:
        return None


def nvml_uuid(torch: ModuleType, index: int) -> str | None:
    """NVML spells UUIDs ``GPU-…``; torch leaves the prefix out. Only after CUDA init."""
    try:
        return f"GPU-{torch.cuda.get_device_properties(index).uuid}"
    except (AttributeError, RuntimeError):
        return None


def snapshot_segments(torch: ModuleType) -> list[dict[str, Any]]:
    """Allocator segments of all devices, without allocation history.

    With history recorded, trace entries can make a snapshot take seconds; torch >= 2.11 can
    leave them out (``include_traces=False``). Older torch only has ``memory._snapshot()``.
    """
    snapshot = torch.cuda.memory_snapshot
    if "include_traces" in inspect.signature(snapshot).parameters:
        return snapshot(include_traces=False)
    return torch.cuda.memory._snapshot()["segments"]


def allocator_readings(
    torch: ModuleType,
    uuid_of: Callable[[ModuleType, int], str | None],
    process_bytes: Callable[[str | None, int], int | None] = lambda uuid, reserved: None,
) -> dict[int, DeviceReading]:
    """Each CUDA device whose allocator holds or held memory, read now (CUDA must be initialised).

    Shared by the kernel's timeline and the DDP ranks, which measure their own cells.
    """
    readings = {}
    for index in range(torch.cuda.device_count()):
        # The nested form: the flat memory_stats() builds ~150 keys in Python first.
        stats = torch.cuda.memory_stats_as_nested_dict(index)
        allocated = stats.get("allocated_bytes", {}).get("all", {})
        reserved_now = stats.get("reserved_bytes", {}).get("all", {})
        if not reserved_now.get("peak"):
            continue  # a device this process never used
        uuid = uuid_of(torch, index)
        reserved = reserved_now.get("current", 0)
        readings[index] = DeviceReading(
            index=index,
            uuid=uuid,
            allocated_bytes=allocated.get("current", 0),
            reserved_bytes=reserved,
            peak_allocated_bytes=allocated.get("peak", 0),
            ooms=stats.get("num_ooms", 0),
            process_bytes=process_bytes(uuid, reserved),
        )
    return readings
