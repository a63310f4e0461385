"""Why a kernel died, from what the server saw around it: its exit status, the out-of-memory
killer's count in its memory cgroup before and after, and the GPU errors (XIDs) NVML reported
while it ran. Pure, so each cause tests without killing anything.

Never a guess: the OOM killer is named only when the kernel died of SIGKILL *and* the count in
its own cgroup rose; a GPU error only when one was reported on a GPU the kernel used.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

from .units import format_bytes

CauseName = Literal["oom_killed", "gpu_error", "signal", "exited"]


@dataclass(frozen=True)
class Seen:
    """What the server knew about a kernel when it died."""

    returncode: int | None  # Popen's: negative is the signal that ended it
    oom_kills_before: int | None  # in the kernel's memory cgroup, when the server began watching
    oom_kills_after: int | None
    memory_limit_bytes: int | None  # the cgroup's, tightest on the way up
    last_rss_bytes: int | None  # the kernel's resident memory at the server's last look
    xids: tuple[tuple[int, int], ...] = ()  # (gpu index, xid) on GPUs it used, while it ran
    cell: int | None = None  # execution count of the cell that was running


@dataclass(frozen=True)
class Cause:
    cause: CauseName
    detail: str  # a sentence with the figures


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; the number where Python has no name for it."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _while(cell: int | None) -> str:
    return f" while cell [{cell}] ran" if cell is not None else ""


def classify(seen: Seen) -> Cause:
    """The cause of one death and the sentence the user reads."""
    killed_by = -seen.returncode if seen.returncode is not None and seen.returncode < 0 else None
    rose = (
        seen.oom_kills_before is not None
        and seen.oom_kills_after is not None
        and seen.oom_kills_after > seen.oom_kills_before
    )
    if killed_by == signal.SIGKILL and rose:
        limit = (
            f"the container's limit is {format_bytes(seen.memory_limit_bytes)}"
            if seen.memory_limit_bytes is not None
            else "the machine ran out of memory"
        )
        held = f" and it held {format_bytes(seen.last_rss_bytes)}" if seen.last_rss_bytes is not None else ""
        return Cause(
            "oom_killed",
            f"the kernel was killed by the out-of-memory killer: {limit}{held}{_while(seen.cell)}",
        )
    if seen.xids:
        gpu, xid = seen.xids[-1]
        more = f" ({len(seen.xids)} GPU errors in all)" if len(seen.xids) > 1 else ""
        return Cause(
            "gpu_error", f"GPU {gpu} reported Xid {xid}{_while(seen.cell)}{more}; the kernel then died"
        )
    if killed_by is not None:
        return Cause("signal", f"the kernel was ended by {signal_name(killed_by)}{_while(seen.cell)}")
    code = "an unknown status" if seen.returncode is None else f"status {seen.returncode}"
    return Cause("exited", f"the kernel exited with {code}{_while(seen.cell)}")
