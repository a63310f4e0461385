"""What the instructor's page shows, from what each user server answered (pure functions).

A user server's kernels reply is checked strictly here, field by field, for what this page reads,
rather than against the whole kernels schema: a server one release older or newer (with or without
the idle fields ``idle_seconds``/``idle_holding``/``last_activity``) still shows, while any field of
the wrong type, or a number out of bounds (NaN, infinity, a count no float holds: ``format_bytes``
of 10**400 raises), makes the server an error row instead of a wrong number on the page, or of a
page that fails for every server because one student's server sent it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..analysis.bounded import MAX_COUNT, is_int, is_number
from ..analysis.units import format_bytes, format_bytes_of, format_duration
from ..server.schema import VERSION

DASH = "\u2014"  # what the page shows for a figure the server did not send

# A server's row: 'ok', 'not_answering' (no reply within the timeout, refused, reset) or 'error'
# (an answer that is not a kernels reply: an HTTP error, garbage, an unexpected shape).
STATES = ("ok", "not_answering", "error")


class BadReply(ValueError):
    """A reply that is not what a jupyter_gpu server sends; the message says what is wrong."""


@dataclass(frozen=True)
class UserServer:
    """A running server as the Hub lists it; ``url`` is its path behind the proxy, e.g. '/user/ada/'."""

    user: str
    name: str  # '' for the user's default server
    url: str


@dataclass(frozen=True)
class Reading:
    """What one user server answered: its kernels and its latest GPU sample, or why not."""

    server: UserServer
    state: str
    reason: str | None = None
    kernels: list[dict[str, Any]] | None = None  # as check_kernels passed them
    gpus: list[dict[str, Any]] | None = None  # as check_telemetry passed them


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise BadReply(what)


def _check_version(data: Any, route: str) -> dict[str, Any]:
    _need(isinstance(data, dict), f"the {route} reply is not a JSON object")
    version = data.get("version")
    _need(
        version == VERSION, f"the {route} reply has version {version!r}; this service reads version {VERSION}"
    )
    return data


def check_kernels(data: Any) -> list[dict[str, Any]]:
    """The kernels of a ``GET api/gpu/kernels`` reply; BadReply for anything else."""
    kernels: Any = _check_version(data, "kernels").get("kernels")
    _need(isinstance(kernels, list), "`kernels` is not a list")
    for n, k in enumerate(kernels):
        where = f"kernel {n}"
        _need(isinstance(k, dict), f"{where} is not an object")
        _need(isinstance(k.get("id"), str) and bool(k["id"]), f"{where} has no id")
        _need(k.get("path") is None or isinstance(k["path"], str), f"{where}: `path` is not a string")
        _need(isinstance(k.get("name", ""), str), f"{where}: `name` is not a string")
        state = k.get("execution_state")
        _need(state is None or isinstance(state, str), f"{where}: `execution_state` is not a string")
        rows = k.get("gpu_memory")
        _need(isinstance(rows, list), f"{where}: `gpu_memory` is not a list")
        for row in rows:
            _need(
                isinstance(row, dict)
                and is_int(row.get("gpu_index"), 0, MAX_COUNT)
                and is_int(row.get("used_memory_bytes"), 0, MAX_COUNT),
                f"{where}: a `gpu_memory` row without gpu_index and used_memory_bytes",
            )
        allocator = k.get("allocator")
        if allocator is not None:
            devices: Any = allocator.get("devices") if isinstance(allocator, dict) else None
            _need(isinstance(devices, list), f"{where}: `allocator` without devices")
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
    return kernels


def check_telemetry(data: Any) -> list[dict[str, Any]]:
    """The GPUs of the latest sample in a ``GET api/gpu/telemetry`` reply (none before the first
    sample or without NVML); BadReply for anything else."""
    latest = _check_version(data, "telemetry").get("latest")
    if latest is None:
        return []
    _need(isinstance(latest, dict) and is_number(latest.get("t"), 0), "`latest` is not a sample")
    gpus: Any = latest.get("gpus")
    _need(isinstance(gpus, list), "`latest.gpus` is not a list")
    for gpu in gpus:
        _need(isinstance(gpu, dict) and is_int(gpu.get("index"), 0, MAX_COUNT), "a GPU without an index")
        _need(gpu.get("uuid") is None or isinstance(gpu["uuid"], str), "a GPU whose uuid is not a string")
        for field in ("memory_used_bytes", "memory_total_bytes"):
            _need(
                gpu.get(field) is None or is_int(gpu[field], 0, MAX_COUNT),
                f"a GPU whose `{field}` is not a byte count",
            )
    return [{**gpu, "t": latest["t"]} for gpu in gpus]


def kernel_row(server: UserServer, kernel: dict[str, Any]) -> dict[str, Any]:
    """One kernel as the page lists it; idle fields are None where the server did not send them."""
    devices = (kernel.get("allocator") or {}).get("devices") or []
    memory = sum(row["used_memory_bytes"] for row in kernel["gpu_memory"])
    allocated = sum(d["allocated_bytes"] for d in devices) if devices else None
    reserved = sum(d["reserved_bytes"] for d in devices) if devices else None
    idle = kernel.get("idle_seconds")
    return {
        "user": server.user,
        "server": server.name,
        "kernel_id": kernel["id"],
        "kernel_name": kernel.get("name") or "",
        "notebook": kernel.get("path"),
        "execution_state": kernel.get("execution_state"),
        "gpus": sorted({row["gpu_index"] for row in kernel["gpu_memory"]}),
        "memory_bytes": memory,
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "idle_seconds": idle,
        "idle_holding": kernel.get("idle_holding"),
        "last_activity": kernel.get("last_activity"),
        "text": {
            "memory": format_bytes(memory),
            "allocated": DASH if allocated is None else format_bytes(allocated),
            "reserved": DASH if reserved is None else format_bytes(reserved),
            # as the panel says it (format_duration is formatAge's twin)
            "idle": DASH if idle is None else format_duration(idle),
        },
    }


def kernel_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Idle holders first, biggest first; then the rest by memory held, longest idle first."""
    return (
        not row["idle_holding"],
        -row["memory_bytes"],
        -(row["idle_seconds"] if row["idle_seconds"] is not None else -1.0),
        row["user"],
        row["notebook"] or "",
    )


def gpu_rows(readings: Iterable[Reading], *, now: float) -> list[dict[str, Any]]:
    """Each GPU once (by UUID: servers on one node see the same GPUs).

    Every student's server reports the node's GPUs, and any of them may lie. So where they
    disagree the largest memory in use is shown (a student cannot make a full GPU look empty,
    only an empty one look full, which an instructor looks into), and a sample time from the
    future is taken as now.
    """

    def used(gpu: dict[str, Any]) -> int:
        value = gpu.get("memory_used_bytes")
        return value if isinstance(value, int) else -1

    chosen: dict[tuple[str, ...], tuple[dict[str, Any], set[str]]] = {}
    for reading in readings:
        for gpu in reading.gpus or []:
            key = (
                (gpu["uuid"],)
                if gpu.get("uuid")
                else (reading.server.user, reading.server.name, str(gpu["index"]))
            )
            seen = chosen.get(key)
            users = (seen[1] if seen else set()) | {reading.server.user}
            gpu = {**gpu, "t": min(gpu["t"], now)}
            if seen is None or (used(gpu), gpu["t"]) > (used(seen[0]), seen[0]["t"]):
                chosen[key] = (gpu, users)
            else:
                chosen[key] = (seen[0], users)
    rows = [
        {
            "index": gpu["index"],
            "uuid": gpu.get("uuid"),
            "memory_used_bytes": gpu.get("memory_used_bytes"),
            "memory_total_bytes": gpu.get("memory_total_bytes"),
            "sampled_at": gpu["t"],
            "users": sorted(users),
            "text": {"memory": format_bytes_of(gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes"))},
        }
        for gpu, users in chosen.values()
    ]
    return sorted(rows, key=lambda r: (r["index"], r["uuid"] or ""))


def build(readings: list[Reading], *, now: float, timeout: float) -> dict[str, Any]:
    """The reply of ``api/kernels`` (and what the page draws)."""
    kernels = [kernel_row(r.server, k) for r in readings if r.kernels is not None for k in r.kernels]
    servers = [
        {
            "user": r.server.user,
            "server": r.server.name,
            "state": r.state,
            "reason": r.reason,
            "kernels": len(r.kernels) if r.kernels is not None else None,
        }
        for r in readings
    ]
    servers.sort(key=lambda s: (s["state"] == "ok", s["user"], s["server"]))
    return {
        "version": VERSION,
        "now": now,
        "timeout_seconds": timeout,
        "gpus": gpu_rows(readings, now=now),
        "kernels": sorted(kernels, key=kernel_order),
        "servers": servers,
    }
