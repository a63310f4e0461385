"""Turn what came back from the ranks into the one exception the notebook cell shows."""
from __future__ import annotations

from .errors import DDPError, DDPInterrupted, render
from .gang import Collected


def ranks_text(ranks: list[int]) -> str:
    """'rank 1' or 'ranks 0, 2'."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def incomplete(got: Collected, expected: int) -> bool:
    return bool(got.failures()) or len(got.replies) < expected


def error_for(got: Collected, ranks: list[int], cell_source: str, label: str,
              timeout: float | None, stopped: bool = True) -> DDPError:
    """Explain why ``got`` is not a full set of successful replies (the ranks are already down)."""
    silent = [r for r in ranks if r not in got.replies]
    tail_note = [f"\n({ranks_text(silent)} stopped)\n"] if silent and stopped else []
    failures = got.failures()
    if failures:
        first = failures[0]
        err = first.error
        lines = [f"Error on rank {first.rank}:\n"]
        lines += render(err, cell_source, label) if err is not None else ["(no traceback)\n"]
        for other in failures[1:]:
            summary = other.error.summary if other.error is not None else "failed"
            lines.append(f"rank {other.rank} also failed: {summary}\n")
        summary = err.summary if err is not None else "failed"
        return DDPError(f"rank {first.rank}: {summary}", lines + tail_note)
    if got.death is not None:
        death = got.death
        lines = [death.describe() + "\n"]
        if death.message:
            lines += [death.message.rstrip("\n") + "\n"]
        if death.stderr_tail:
            lines.append(f"last lines of rank {death.rank}'s stderr:\n")
            lines += [f"    {line}\n" for line in death.stderr_tail]
        return DDPError(death.describe(), lines + tail_note)
    if got.aborted:
        msg = "the ranks of another node failed, so this node's ranks were stopped"
        return DDPError(msg, [msg + "\n"])
    if got.expired:
        msg = f"timed out after {timeout:g} s; the ranks were stopped"
        return DDPInterrupted(msg, [f"DDPInterrupted: {msg}\n"])
    msg = f"{ranks_text(silent)} exited without reporting back"
    return DDPError(msg, [msg + "\n"])


def interrupted(ranks: list[int]) -> DDPInterrupted:
    msg = f"interrupted; stopped {ranks_text(ranks)}"
    return DDPInterrupted(msg, [f"KeyboardInterrupt: {msg}\n"])
