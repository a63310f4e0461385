"""Turn what came back from the ranks into the one exception the notebook cell shows."""

from __future__ import annotations

from .errors import DDPError, DDPInterrupted, render
from .gang import Collected
from .protocol import Reply


def ranks_text(ranks: list[int]) -> str:
    """'rank 1' or 'ranks 0, 2'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def incomplete(got: Collected, expected: int) -> bool:
    return bool(got.failures()) or len(got.replies) < expected


def error_for(
    got: Collected,
    ranks: list[int],
    cell_source: str,
    label: str,
    timeout: float | None,
    stopped: bool = True,
) -> DDPError:
    """Explain why ``got`` is not a full set of successful replies (the ranks are already down)."""
    dead = got.death.rank if got.death is not None else None
    silent = [r for r in ranks if r not in got.replies and r != dead]
    tail_note = [f"\n({ranks_text(silent)} stopped)\n"] if silent and stopped else []
    failures = got.failures()
    if got.death is not None:  # a dead rank explains its peers' collective errors, not vice versa
        death = got.death
        others = [f"rank {r.rank} then failed: {_summary(r)}\n" for r in failures]
        if death.exception is not None:
            # It raised: what it raised comes first, however the process then ended (a
            # library's threads can still turn a plain exit into SIGABRT).
            lines = [
                f"Error on rank {death.rank} (pid {death.pid}):\n",
                death.message.rstrip("\n") + "\n",
                f"(rank {death.rank} then {death.ending})\n",
            ]
            return DDPError(f"rank {death.rank}: {death.exception}", lines + others + tail_note)
        lines = [death.describe() + "\n"]
        if death.stderr_tail:  # a signal or a plain exit: its last words are the best clue
            lines.append(f"last lines of rank {death.rank}'s stderr:\n")
            lines += [f"    {line}\n" for line in death.stderr_tail]
        return DDPError(death.describe(), lines + others + tail_note)
    if failures:
        first = failures[0]
        err = first.error
        lines = [f"Error on rank {first.rank}:\n"]
        lines += render(err, cell_source, label) if err is not None else ["(no traceback)\n"]
        lines += [f"rank {other.rank} also failed: {_summary(other)}\n" for other in failures[1:]]
        return DDPError(f"rank {first.rank}: {_summary(first)}", lines + tail_note)
    if got.aborted:
        msg = "the ranks of another node failed, so this node's ranks were stopped"
        return DDPError(msg, [msg + "\n"])
    if got.expired:
        msg = f"timed out after {timeout:g} s; the ranks were stopped"
        return DDPInterrupted(msg, [f"DDPInterrupted: {msg}\n"])
    msg = f"{ranks_text(silent)} exited without reporting back"
    return DDPError(msg, [msg + "\n"])


def _summary(reply: Reply) -> str:
    return reply.error.summary if reply.error is not None else "failed"


def interrupted(ranks: list[int]) -> DDPInterrupted:
    msg = f"interrupted; stopped {ranks_text(ranks)}"
    return DDPInterrupted(msg, [f"KeyboardInterrupt: {msg}\n"])
