"""The file through which a kernel tells the server about its allocator.

The kernel agent builds it with ``device_record``; the server checks it with ``validate``. Both
sides import this module, so the name, version and field types are defined once. The server
trusts nothing in the file: ``validate`` returns a reason for anything off, and a clean copy
holding only the known fields.
"""

from __future__ import annotations

import re
from typing import Any

from .bounded import MAX_COUNT, is_int, is_number
from .fragmentation import POOLS, AllocatorFigures

VERSION = 1
FILE_PREFIX = "jupyter_gpu-kernel-"
# Kernel ids are UUIDs in practice; anything that could leave the runtime dir is refused.
KERNEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_DEVICES = 64
# A 64-GPU record is ~40 KiB; anything much bigger is not an agent's.
MAX_BYTES = 256 * 1024
# Linux's PID_MAX_LIMIT; other systems stay below it.
MAX_PID = 2**22
# How the kernel found its process in NVML's list (analysis/nvml_identity.py); absent: not tried.
NVML_MATCHES = ("same_namespace", "matched", "ambiguous", "unmatched")

_COUNTS = (
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "requested_bytes",
    "inactive_split_bytes",
    "reserved_unallocated_bytes",
    "num_alloc_retries",
    "num_ooms",
    "peak_allocated_bytes",
)


def file_name(kernel_id: str) -> str:
    """``jupyter_gpu-kernel-<id>.json``; raises ValueError for ids that are not plain names."""
    if not KERNEL_ID.fullmatch(kernel_id):
        raise ValueError(f"not a kernel id: {kernel_id!r}")
    return f"{FILE_PREFIX}{kernel_id}.json"


def device_record(
    index: int,
    uuid: str | None,
    figures: AllocatorFigures,
    snapshot_time: float | None,
) -> dict[str, Any]:
    """One entry of ``devices``; snapshot fields are null until a snapshot was taken."""
    snapshot = figures.snapshot
    fragmentation = figures.fragmentation
    return {
        "index": index,
        "uuid": uuid,
        "allocated_bytes": figures.allocated_bytes,
        "reserved_bytes": figures.reserved_bytes,
        "active_bytes": figures.active_bytes,
        "requested_bytes": figures.requested_bytes,
        "inactive_split_bytes": figures.inactive_split_bytes,
        "reserved_unallocated_bytes": max(0, figures.reserved_unallocated_bytes),
        # A snapshot a few seconds older than the stats can make the sum overshoot slightly.
        "fragmentation": None if fragmentation is None else min(1.0, fragmentation),
        "num_alloc_retries": figures.num_alloc_retries,
        "num_ooms": figures.num_ooms,
        "peak_allocated_bytes": figures.peak_allocated_bytes,
        "largest_free_block_bytes": dict(snapshot.largest_free_block_bytes) if snapshot else None,
        "segments": snapshot.segments if snapshot else None,
        "snapshot_time": snapshot_time if snapshot else None,
        "expandable_segments": snapshot.expandable if snapshot else None,
    }


def _device(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if not isinstance(raw, dict):
        return None, "device entry is not an object"
    out: dict[str, Any] = {}
    if not is_int(raw.get("index"), 0, MAX_DEVICES - 1):
        return None, f"device index is not an integer from 0 to {MAX_DEVICES - 1}"
    out["index"] = raw["index"]
    uuid = raw.get("uuid")
    if uuid is not None and not (isinstance(uuid, str) and len(uuid) <= 128):
        return None, "device uuid is not a short string"
    out["uuid"] = uuid
    for key in _COUNTS:
        if not is_int(raw.get(key), 0, MAX_COUNT):
            return None, f"{key} is not an integer from 0 to 2**53"
        out[key] = raw[key]
    fragmentation = raw.get("fragmentation")
    if fragmentation is not None and not is_number(fragmentation, 0, 1):
        return None, "fragmentation is not a number between 0 and 1"
    out["fragmentation"] = fragmentation
    largest = raw.get("largest_free_block_bytes")
    if largest is not None:
        if not (isinstance(largest, dict) and all(is_int(largest.get(p), 0, MAX_COUNT) for p in POOLS)):
            return None, "largest_free_block_bytes is not a per-pool object of integers up to 2**53"
        largest = {p: largest[p] for p in POOLS}
    out["largest_free_block_bytes"] = largest
    segments = raw.get("segments")
    if segments is not None and not is_int(segments, 0, MAX_COUNT):
        return None, "segments is not an integer from 0 to 2**53"
    out["segments"] = segments
    snapshot_time = raw.get("snapshot_time")
    if snapshot_time is not None and not is_number(snapshot_time):
        return None, "snapshot_time is not a finite number"
    out["snapshot_time"] = snapshot_time
    expandable = raw.get("expandable_segments")
    if expandable is not None and not isinstance(expandable, bool):
        return None, "expandable_segments is not a boolean"
    out["expandable_segments"] = expandable
    return out, None


def validate(doc: Any, kernel_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """A clean copy of a parsed stats file, or None and the reason it was refused."""
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        return None, f"unsupported version {doc.get('version')!r}"
    if doc.get("kernel_id") != kernel_id:
        return None, "kernel_id does not match the file name"
    pid = doc.get("pid")
    if not is_int(pid, 1, MAX_PID):
        return None, f"pid is not an integer from 1 to {MAX_PID}"
    if not is_number(doc.get("time")):
        return None, "time is not a finite number"
    if not isinstance(doc.get("cuda_in_use"), bool):
        return None, "cuda_in_use is not a boolean"
    devices = doc.get("devices")
    if not isinstance(devices, list) or len(devices) > MAX_DEVICES:
        return None, "devices is not a list of at most 64 entries"
    clean_devices: list[dict[str, Any]] = []
    for raw in devices:
        device, reason = _device(raw)
        if device is None:
            return None, reason
        # The same device twice would be two Prometheus series with the same labels.
        if any(d["index"] == device["index"] for d in clean_devices):
            return None, f"device {device['index']} is listed twice"
        if device["uuid"] is not None and any(d["uuid"] == device["uuid"] for d in clean_devices):
            return None, f"device uuid {device['uuid']} is listed twice"
        clean_devices.append(device)
    nvml_pid, nvml_match = doc.get("nvml_pid"), doc.get("nvml_match")
    if nvml_pid is not None and not is_int(nvml_pid, 1, MAX_PID):
        return None, f"nvml_pid is not an integer from 1 to {MAX_PID}"
    if nvml_match is not None and nvml_match not in NVML_MATCHES:
        return None, f"nvml_match is not one of {', '.join(NVML_MATCHES)}"
    if (nvml_pid is None) != (nvml_match not in ("matched", "same_namespace")):
        return None, "nvml_pid is given exactly when nvml_match is matched or same_namespace"
    return {
        "version": VERSION,
        "kernel_id": kernel_id,
        "pid": pid,
        "time": doc["time"],
        "cuda_in_use": doc["cuda_in_use"],
        "devices": clean_devices,
        "nvml_pid": nvml_pid,
        "nvml_match": nvml_match,
    }, None
