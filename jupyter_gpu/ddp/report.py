"""Turn what came back from the ranks into what the cell shows: the one exception when they
failed, each rank's memory after an ``--fsdp`` cell."""

from __future__ import annotations

from collections.abc import Mapping

from ..analysis.units import format_bytes
from .errors import DDPError, DDPInterrupted, render
from .outcome import Collected
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
    hosts: Mapping[int, str] | None = None,
) -> DDPError:
    """Explain why ``got`` is not a full set of successful replies (the ranks are already down).

    ``hosts`` (rank -> node) names the node of a failing or lost rank, where ranks span several."""
    hosts = hosts or {}
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
                f"Error on {death.who}:\n",
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
        node = f" on {hosts[first.rank]}" if first.rank in hosts else ""
        lines = [f"Error on rank {first.rank}{node}:\n"]
        lines += render(err, cell_source, label) if err is not None else ["(no traceback)\n"]
        lines += [f"rank {other.rank} also failed: {_summary(other)}\n" for other in failures[1:]]
        return DDPError(f"rank {first.rank}{node}: {_summary(first)}", lines + tail_note)
    if got.aborted:
        msg = "the ranks of another node failed, so this node's ranks were stopped"
        return DDPError(msg, [msg + "\n"])
    if got.expired:
        msg = f"timed out after {timeout:g} s; the ranks were stopped"
        return DDPInterrupted(msg, [f"DDPInterrupted: {msg}\n"])
    if got.lost:
        nodes = sorted({hosts[rank] for rank in got.lost if rank in hosts})
        where = f" (on {', '.join(nodes)})" if nodes else ""
        msg = (
            f"{ranks_text(got.lost)}{where} stopped answering: the channel to the kernel closed "
            f"(a rank's code closed it, or it was cut{', or the node died' if nodes else ''})"
        )
        return DDPError(msg, [msg + "\n"])
    msg = f"{ranks_text(silent)} exited without reporting back"
    return DDPError(msg, [msg + "\n"])


def _summary(reply: Reply) -> str:
    return reply.error.summary if reply.error is not None else "failed"


def interrupted(ranks: list[int]) -> DDPInterrupted:
    msg = f"interrupted; stopped {ranks_text(ranks)}"
    return DDPInterrupted(msg, [f"KeyboardInterrupt: {msg}\n"])


MAX_RANK_LINES = 8  # ranks listed one per line; more are summed up by the largest


def memory_lines(replies: Mapping[int, Reply]) -> list[str]:
    """What each rank holds after an ``--fsdp`` cell (parameter shards, gradients, optimizer
    state, and on GPUs the allocator's figures), one line per rank: sharding paying off, seen."""
    lines = []
    for rank in sorted(replies)[:MAX_RANK_LINES]:
        info = replies[rank].info
        held = info.get("held") or {}
        parts = [
            f"parameters {format_bytes(held.get('parameters'))} of {format_bytes(held.get('parameters_full'))}",
            f"gradients {format_bytes(held.get('gradients'))}",
            f"optimizer state {format_bytes(held.get('optimizer'))}",
        ]
        for gpu in info.get("cell_gpus", []):
            peak = gpu.get("peak_allocated_bytes")
            shown = (
                f"{format_bytes(peak)}"
                if peak is not None
                else f"at most {format_bytes(gpu.get('peak_at_most_bytes'))}"
            )
            parts.append(
                f"GPU {gpu.get('index')} allocated {format_bytes(gpu.get('allocated_bytes'))}, cell peak {shown}"
            )
        lines.append(f"rank {rank}: " + ", ".join(parts) + "\n")
    rest = sorted(replies)[MAX_RANK_LINES:]
    if rest:
        most = max(rest, key=lambda r: (replies[r].info.get("held") or {}).get("parameters", 0))
        lines.append(f"... and {len(rest)} more ranks (most parameters: rank {most})\n")
    return lines
