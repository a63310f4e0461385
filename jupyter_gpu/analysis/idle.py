"""Which kernels sit idle on GPU memory, and which the culler shuts down (pure functions).

A kernel is idle when jupyter_server's kernel manager says its execution state is ``idle`` (or
``starting``: no client has used it yet); how long for is the time since the manager last saw
activity on it (``last_activity``: any message on the kernel's IOPub channel that jupyter_server
counts). A busy or restarting kernel is never idle, whatever its last activity: a cell that runs
for an hour prints nothing and is still in use. The culler follows jupyter_server's own culler: never a busy kernel, and kernels
with open connections (a notebook tab) only when told to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

CullAction = Literal["keep", "warn", "cull"]
# jupyter_server reports 'starting' until a client talks to the kernel: a kernel nobody has
# used since it started is idle (its last activity is its start), as jupyter_server's culler sees it.
IDLE_STATES = frozenset({"idle", "starting"})


def idle_seconds(execution_state: str | None, last_activity: float | None, now: float) -> float | None:
    """Seconds the kernel has been idle, or None when it is not idle (busy, starting, dead...)."""
    if execution_state not in IDLE_STATES or last_activity is None:
        return None
    return max(0.0, now - last_activity)


def idle_holding(idle: float | None, memory_bytes: int, *, after: float, min_memory: int) -> bool:
    """Idle at least ``after`` seconds while holding at least ``min_memory`` bytes of GPU memory."""
    return idle is not None and idle >= after and memory_bytes >= min_memory and memory_bytes > 0


@dataclass(frozen=True)
class CullPolicy:
    """``c.GPUMonitor.cull_*``: ``idle_after`` 0 turns the culler off."""

    idle_after: float
    min_memory: int
    warn_before: float
    cull_connected: bool

    @property
    def enabled(self) -> bool:
        return self.idle_after > 0


def cull_in(policy: CullPolicy, idle: float | None, memory_bytes: int, connections: int) -> float | None:
    """Seconds until the culler shuts the kernel down if nothing happens (0: now), or None when it
    would not: off, not idle, holding less than ``min_memory``, or connected and spared."""
    if not policy.enabled or idle is None or memory_bytes < policy.min_memory:
        return None
    if connections > 0 and not policy.cull_connected:
        return None
    return max(0.0, policy.idle_after - idle)


def cull_action(remaining: float | None, warn_before: float, already_warned: bool) -> CullAction:
    """What the culler does now, given ``cull_in``'s answer: a warning once, ``warn_before``
    seconds ahead (if set), then the shutdown."""
    if remaining is None:
        return "keep"
    if remaining <= 0:
        return "cull"
    if warn_before > 0 and remaining <= warn_before and not already_warned:
        return "warn"
    return "keep"


def server_idle_seconds(kernels: list[dict[str, Any]] | None, quiet_for: float) -> float | None:
    """How long a user server has been idle, for the Hub's culler: the shortest idle time among
    its kernels (as its jupyter_gpu reports them), or ``quiet_for`` (how long the culler has seen
    it with no kernel, or not answering) when it has none; None while any kernel is busy or its
    idle time is not known. Open tabs do not count: a forgotten one polls for ever."""
    if not kernels:
        return quiet_for
    times = [k.get("idle_seconds") for k in kernels]
    if any(t is None for t in times):
        return None
    return min(float(t) for t in times if t is not None)
