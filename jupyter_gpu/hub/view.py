"""What the instructor's page shows, from what each user server answered (pure functions).

The replies come checked and bounded (``replies``), but any of them may still lie. So what a
server says about a GPU (its index and total memory under its UUID) is shown as fact only where
the Hub node's own NVML reading, or the servers of two users at least, say the same; any other
claim is a row of its own that says whose claim it is. And a server whose kernels hold more
memory on a GPU than that GPU has, as confirmed (or memory on a GPU nobody confirms), has its
kernels listed after everyone else's and marked: fake kernels cannot push the real students off
the top of the page, and a cut list or a cut string is said, never silent.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.bounded import cut
from ..analysis.units import format_bytes, format_bytes_of, format_duration
from ..server.schema import VERSION
from .replies import Listed

DASH = "\u2014"  # what the page shows for a figure the server did not send
MAX_REASON = 300  # characters of a server's reason on the page

# A server's row: 'ok', 'not_answering' (no reply within the timeout, refused, reset) or 'error'
# (an answer that is not a kernels reply: an HTTP error, garbage, an unexpected shape).
STATES = ("ok", "not_answering", "error")

# A GPU as one server describes it: (which GPU, index, total memory). Which GPU is ("uuid", its
# UUID), or ("server", user, server name) for one without a UUID, which nobody else can confirm.
Claim = tuple[tuple[str, ...], int, int | None]


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
    kernels: Listed | None = None  # as replies.check_kernels passed them
    gpus: Listed | None = None  # as replies.check_telemetry passed them


def _claim(reading: Reading, gpu: dict[str, Any]) -> Claim:
    which = ("uuid", gpu["uuid"]) if gpu["uuid"] else ("server", reading.server.user, reading.server.name)
    return (which, gpu["index"], gpu["memory_total_bytes"])


def _gpus(reading: Reading) -> list[dict[str, Any]]:
    return reading.gpus.rows if reading.gpus is not None else []


def agreed(readings: Iterable[Reading], node: Sequence[dict[str, Any]] = ()) -> set[Claim]:
    """The claims taken as fact. For a GPU the Hub node reads itself (``node``: index, uuid, name,
    memory_total_bytes), what it reads; for any other, the claim that the most users' servers
    make, if two users at least make it and no other claim is made by as many."""
    facts: set[Claim] = {
        (("uuid", g["uuid"]), g["index"], g.get("memory_total_bytes")) for g in node if g.get("uuid")
    }
    read_here = {which for which, _, _ in facts}
    users: dict[Claim, set[str]] = defaultdict(set)
    for reading in readings:
        for gpu in _gpus(reading):
            users[_claim(reading, gpu)].add(reading.server.user)
    votes: dict[tuple[str, ...], Counter[Claim]] = defaultdict(Counter)
    for claim, who in users.items():
        if claim[0][0] == "uuid" and claim[0] not in read_here:
            votes[claim[0]][claim] = len(who)
    for counted in votes.values():
        (best, most), *others = counted.most_common(2)
        if most >= 2 and not (others and others[0][1] == most):
            facts.add(best)
    return facts


def backed(reading: Reading, facts: set[Claim]) -> bool:
    """Whether the server's kernels together hold, on each GPU, at most what that GPU has as
    confirmed (a kernel's GPU is its server's GPU of that index)."""
    have = {g["index"]: g["memory_total_bytes"] for g in _gpus(reading) if _claim(reading, g) in facts}
    held: Counter[int] = Counter()
    for kernel in reading.kernels.rows if reading.kernels is not None else []:
        for row in kernel["gpu_memory"]:
            held[row["gpu_index"]] += row["used_memory_bytes"]
    return all(used <= (have.get(index) or 0) for index, used in held.items())


def kernel_row(server: UserServer, kernel: dict[str, Any], *, confirmed: bool) -> dict[str, Any]:
    """One kernel as the page lists it; idle fields are None where the server did not send them,
    ``confirmed`` is ``backed`` of its server."""
    devices = (kernel.get("allocator") or {}).get("devices") or []
    memory = sum(row["used_memory_bytes"] for row in kernel["gpu_memory"])
    allocated = sum(d["allocated_bytes"] for d in devices) if devices else None
    reserved = sum(d["reserved_bytes"] for d in devices) if devices else None
    idle = kernel.get("idle_seconds")
    limit = kernel.get("memory_limit_bytes")
    over = limit is not None and any(row["used_memory_bytes"] > limit for row in kernel["gpu_memory"])
    assigned = kernel.get("assigned_gpus")
    doubt = "" if confirmed else " (unconfirmed)"
    return {
        "user": server.user,
        "server": server.name,
        "kernel_id": kernel["id"],
        "kernel_name": kernel.get("name") or "",
        "notebook": kernel.get("path"),
        "execution_state": kernel.get("execution_state"),
        "gpus": sorted({row["gpu_index"] for row in kernel["gpu_memory"]}),
        "memory_bytes": memory,
        "memory_confirmed": confirmed,
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "idle_seconds": idle,
        "idle_holding": kernel.get("idle_holding"),
        "last_activity": kernel.get("last_activity"),
        "memory_limit_bytes": limit,
        "over_limit": over,
        "assigned_gpus": assigned,
        "text": {
            # the quota and assignment are the server's own word, believed as its memory is
            "limit": DASH if limit is None else format_bytes(limit) + (" (over)" if over else "") + doubt,
            "assigned": ", ".join(assigned) + doubt if assigned else DASH,
            "memory": format_bytes(memory),
            "allocated": DASH if allocated is None else format_bytes(allocated),
            "reserved": DASH if reserved is None else format_bytes(reserved),
            # as the panel says it (format_duration is formatAge's twin)
            "idle": DASH if idle is None else format_duration(idle),
        },
    }


def kernel_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Idle holders first, biggest first; then the rest by memory held, longest idle first; the
    kernels of servers whose memory is not confirmed after all the others."""
    return (
        not row["memory_confirmed"],
        not row["idle_holding"],
        -row["memory_bytes"],
        -(row["idle_seconds"] if row["idle_seconds"] is not None else -1.0),
        row["user"],
        row["notebook"] or "",
    )


def gpu_rows(
    readings: Iterable[Reading], *, now: float, node: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Each GPU once per claim made of it (by UUID: servers on one node see the same GPUs),
    the confirmed ones first (``agreed``), each saying who reported it.

    Every student's server reports the node's GPUs, and any of them may lie. So where they
    disagree on the memory in use the largest is shown (a student cannot make a full GPU look
    empty, only an empty one look full, which an instructor looks into), and a sample time from
    the future is taken as now. The name is the Hub node's reading of that GPU, where it has one.
    """
    readings = list(readings)
    facts = agreed(readings, node)
    names = {g["uuid"]: g.get("name") for g in node if g.get("uuid")}

    def used(gpu: dict[str, Any]) -> int:
        value = gpu.get("memory_used_bytes")
        return value if isinstance(value, int) else -1

    chosen: dict[Claim, tuple[dict[str, Any], set[str]]] = {}
    for reading in readings:
        for gpu in _gpus(reading):
            claim = _claim(reading, gpu)
            seen = chosen.get(claim)
            users = (seen[1] if seen else set()) | {reading.server.user}
            gpu = {**gpu, "t": min(gpu["t"], now)}
            if seen is None or (used(gpu), gpu["t"]) > (used(seen[0]), seen[0]["t"]):
                chosen[claim] = (gpu, users)
            else:
                chosen[claim] = (seen[0], users)
    rows = []
    for claim, (gpu, users) in chosen.items():
        confirmed = claim in facts
        who = ", ".join(sorted(users))
        rows.append(
            {
                "index": gpu["index"],
                "uuid": gpu["uuid"],
                "name": names.get(gpu["uuid"]) if confirmed else None,
                "memory_used_bytes": gpu["memory_used_bytes"],
                "memory_total_bytes": gpu["memory_total_bytes"],
                "sampled_at": gpu["t"],
                "users": sorted(users),
                "confirmed": confirmed,
                "text": {
                    "memory": format_bytes_of(gpu["memory_used_bytes"], gpu["memory_total_bytes"]),
                    "seen_by": who if confirmed else f"claimed by {who} alone",
                },
            }
        )
    return sorted(rows, key=lambda r: (not r["confirmed"], r["index"], r["uuid"] or ""))


def _notes(reading: Reading, confirmed: bool) -> list[str]:
    """What the page says it left out of, or doubts in, a server's reply."""
    notes = []
    for listed, what, done in ((reading.kernels, "kernels", "listed"), (reading.gpus, "GPUs", "read")):
        if listed is not None and listed.sent > len(listed.rows):
            notes.append(f"{listed.sent:,} {what}: the first {len(listed.rows)} are {done}")
    if not confirmed:
        notes.append(
            "its kernels hold more GPU memory than its GPUs have, or memory on GPUs that neither "
            "the Hub node nor another user's server confirms: listed last"
        )
    return notes


def build(
    readings: list[Reading], *, now: float, timeout: float, node: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The reply of ``api/kernels`` (and what the page draws); ``node`` is the Hub node's own
    reading of its GPUs, if it has any."""
    facts = agreed(readings, node)
    kernels: list[dict[str, Any]] = []
    servers = []
    for r in readings:
        confirmed = backed(r, facts)
        if r.kernels is not None:
            kernels.extend(kernel_row(r.server, k, confirmed=confirmed) for k in r.kernels.rows)
        servers.append(
            {
                "user": r.server.user,
                "server": r.server.name,
                "state": r.state,
                "reason": None if r.reason is None else cut(r.reason, MAX_REASON),
                "kernels": r.kernels.sent if r.kernels is not None else None,
                "notes": _notes(r, confirmed),
            }
        )
    servers.sort(key=lambda s: (s["state"] == "ok", s["user"], s["server"]))
    return {
        "version": VERSION,
        "now": now,
        "timeout_seconds": timeout,
        "gpus": gpu_rows(readings, now=now, node=node),
        "kernels": sorted(kernels, key=kernel_order),
        "servers": servers,
    }
