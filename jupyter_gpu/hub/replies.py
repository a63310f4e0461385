"""What one user server's reply may put on the instructor's page (pure functions).

A student's server runs her code, so its replies are hostile input. Each reply is checked here,
field by field, for what the page reads, rather than against the whole schema: a server one
release older or newer (with or without the idle fields) still shows, while a field of the wrong
type or a number out of bounds (NaN, infinity, 10**400, which ``format_bytes`` cannot format)
makes the server an error row instead of a wrong number on the page, or a page that fails for
everyone. What passes is bounded: the first ``MAX_KERNELS`` kernels and ``MAX_GPUS`` GPUs (with
how many were sent, so that the page can say what it left out), every string cut to a length,
and only the fields the page reads, so a 15,000-kernel reply costs the page 256 short rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..analysis.bounded import MAX_COUNT, cut, is_int, is_number
from ..server.schema import VERSION

MAX_KERNELS = 256  # rows one server puts on the page
MAX_GPUS = 64  # GPUs one server may report, and GPU indexes 0..63
# Characters kept of each string: a kernel id is a UUID (the actions take up to 128), a kernel
# spec name a word, an execution state a word, an NVML UUID under 80 characters (MIG's included).
TEXT_LIMITS = {"id": 128, "name": 64, "path": 256, "execution_state": 32, "uuid": 96}
VERSION_QUOTED = 32  # of a wrong `version`, what the message quotes


class BadReply(ValueError):
    """A reply that is not what a jupyter_gpu server sends; the message says what is wrong."""


@dataclass(frozen=True)
class Listed:
    """The first rows of a list a server sent, checked and bounded, and how many it sent."""

    rows: list[dict[str, Any]]
    sent: int


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise BadReply(what)


def _text(value: str | None, field: str) -> str | None:
    return None if value is None else cut(value, TEXT_LIMITS[field])


def _check_version(data: Any, route: str) -> dict[str, Any]:
    _need(isinstance(data, dict), f"the {route} reply is not a JSON object")
    version = data.get("version")
    _need(
        version == VERSION,
        f"the {route} reply has version {cut(repr(version), VERSION_QUOTED)}; "
        f"this service reads version {VERSION}",
    )
    return data


def _gpu_list(value: Any, where: str) -> list[Any]:
    _need(isinstance(value, list) and len(value) <= MAX_GPUS, f"{where} is not a list of at most {MAX_GPUS}")
    return list(value)


def _kernel(k: Any, where: str) -> dict[str, Any]:
    """One kernel, with only what the page reads and its strings cut."""
    _need(isinstance(k, dict), f"{where} is not an object")
    _need(isinstance(k.get("id"), str) and bool(k["id"]), f"{where} has no id")
    _need(k.get("path") is None or isinstance(k["path"], str), f"{where}: `path` is not a string")
    _need(isinstance(k.get("name", ""), str), f"{where}: `name` is not a string")
    state = k.get("execution_state")
    _need(state is None or isinstance(state, str), f"{where}: `execution_state` is not a string")
    rows = _gpu_list(k.get("gpu_memory"), f"{where}: `gpu_memory`")
    for row in rows:
        _need(
            isinstance(row, dict)
            and is_int(row.get("gpu_index"), 0, MAX_GPUS - 1)
            and is_int(row.get("used_memory_bytes"), 0, MAX_COUNT),
            f"{where}: a `gpu_memory` row without gpu_index and used_memory_bytes",
        )
    allocator = k.get("allocator")
    devices: list[Any] | None = None
    if allocator is not None:
        found = allocator.get("devices") if isinstance(allocator, dict) else None
        devices = _gpu_list(found, f"{where}: `allocator.devices`")
        for device in devices:
            _need(
                isinstance(device, dict)
                and is_int(device.get("allocated_bytes"), 0, MAX_COUNT)
                and is_int(device.get("reserved_bytes"), 0, MAX_COUNT),
                f"{where}: an allocator device without allocated and reserved bytes",
            )
    for field in ("idle_seconds", "last_activity"):
        _need(k.get(field) is None or is_number(k[field], 0), f"{where}: `{field}` is not a number")
    holding = k.get("idle_holding")
    _need(holding is None or isinstance(holding, bool), f"{where}: `idle_holding` is not true or false")
    limit = k.get("memory_limit_bytes")
    _need(
        limit is None or is_int(limit, 1, MAX_COUNT),
        f"{where}: `memory_limit_bytes` is not a number of bytes",
    )
    assigned = k.get("assigned_gpus")
    _need(
        assigned is None
        or (
            isinstance(assigned, list)
            and len(assigned) <= MAX_GPUS
            and all(isinstance(u, str) for u in assigned)
        ),
        f"{where}: `assigned_gpus` is not a list of GPU UUIDs",
    )
    return {
        "id": _text(k["id"], "id"),
        "name": _text(k.get("name"), "name"),
        "path": _text(k.get("path"), "path"),
        "execution_state": _text(state, "execution_state"),
        "gpu_memory": [
            {"gpu_index": r["gpu_index"], "used_memory_bytes": r["used_memory_bytes"]} for r in rows
        ],
        "allocator": None
        if devices is None
        else {
            "devices": [
                {"allocated_bytes": d["allocated_bytes"], "reserved_bytes": d["reserved_bytes"]}
                for d in devices
            ]
        },
        "idle_seconds": k.get("idle_seconds"),
        "last_activity": k.get("last_activity"),
        "idle_holding": holding,
        "memory_limit_bytes": limit,  # the server's quota per kernel, where it sets one
        "assigned_gpus": None if assigned is None else [_text(u, "uuid") for u in assigned],
    }


def check_kernels(data: Any) -> Listed:
    """The first ``MAX_KERNELS`` kernels of a ``GET api/gpu/kernels`` reply; BadReply for
    anything else. The kernels after them are counted, not read."""
    kernels: Any = _check_version(data, "kernels").get("kernels")
    _need(isinstance(kernels, list), "`kernels` is not a list")
    return Listed([_kernel(k, f"kernel {n}") for n, k in enumerate(kernels[:MAX_KERNELS])], len(kernels))


def check_telemetry(data: Any) -> Listed:
    """The first ``MAX_GPUS`` GPUs of the latest sample in a ``GET api/gpu/telemetry`` reply
    (none before the first sample or without NVML); BadReply for anything else."""
    latest = _check_version(data, "telemetry").get("latest")
    if latest is None:
        return Listed([], 0)
    _need(isinstance(latest, dict) and is_number(latest.get("t"), 0), "`latest` is not a sample")
    gpus: Any = latest.get("gpus")
    _need(isinstance(gpus, list), "`latest.gpus` is not a list")
    kept = []
    for gpu in gpus[:MAX_GPUS]:
        _need(
            isinstance(gpu, dict) and is_int(gpu.get("index"), 0, MAX_GPUS - 1),
            f"a GPU without an index from 0 to {MAX_GPUS - 1}",
        )
        _need(gpu.get("uuid") is None or isinstance(gpu["uuid"], str), "a GPU whose uuid is not a string")
        for field in ("memory_used_bytes", "memory_total_bytes"):
            _need(
                gpu.get(field) is None or is_int(gpu[field], 0, MAX_COUNT),
                f"a GPU whose `{field}` is not a byte count",
            )
        kept.append(
            {
                "index": gpu["index"],
                "uuid": _text(gpu.get("uuid") or None, "uuid"),
                "memory_used_bytes": gpu.get("memory_used_bytes"),
                "memory_total_bytes": gpu.get("memory_total_bytes"),
                "t": latest["t"],
            }
        )
    return Listed(kept, len(gpus))


MAX_TERMINALS = 256  # terminals of one server looked at


def _stamp(value: Any) -> float:
    """Unix seconds of an ISO 8601 time (UTC without a zone, as jupyter_server means it)."""
    _need(isinstance(value, str), "a terminal without a readable `last_activity`")
    try:
        when = datetime.fromisoformat(cut(value, 64))
    except ValueError:
        raise BadReply("a terminal without a readable `last_activity`") from None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def terminals_idle_seconds(body: bytes, now: float) -> float | None:
    """Seconds since the newest activity of a server's terminals (jupyter_server's
    ``GET api/terminals``: name and ``last_activity`` in ISO 8601), None without a terminal; at
    ``now`` (unix seconds). A time in the future counts as now: it can only keep a server."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise BadReply("the terminals reply is not JSON") from None
    _need(isinstance(data, list), "the terminals reply is not a list")
    stamps = [_stamp(t.get("last_activity") if isinstance(t, dict) else None) for t in data[:MAX_TERMINALS]]
    return max(0.0, now - max(stamps)) if stamps else None
