"""Persistent ranks (``%ddp_start`` … ``%%ddp`` … ``%ddp_stop``): start-up paid once, state kept.

Interrupts and failures must leave the session in a known state. A rank that raises or is
interrupted reports back and stays alive with its namespace. A rank that does not report back
within a grace period is most likely blocked inside a collective (waiting for a peer that will
never join), where no Python signal handler can run: then all ranks are stopped and the session
waits for ``%ddp_restart``, because a process group with a half-finished collective cannot be
trusted (NCCL state in particular).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..analysis.units import format_bytes
from . import checkpoint_files, report
from .errors import BadInput, DDPError, DDPInterrupted
from .gang import Gang
from .launch import cell_gang, check_syntax, rank_figures
from .options import CellOptions, WorkerOptions
from .outcome import Collected
from .output import CellStreams
from .protocol import Command, Reply

# After one rank failed: how long the others may take to finish, then to obey SIGINT. Short, so
# the error shows within ~2 s even when the others wait in a collective that will never end.
FINISH_GRACE = 0.5
FAILURE_INTERRUPT_GRACE = 1.0
# After a user interrupt: a rank inside a long C++ op (no Python signal handling until it
# returns) gets longer before its session is given up. With --timeout T this grace comes out of
# T (at most a third of it), so the cell returns after T seconds, not T plus the grace.
INTERRUPT_GRACE = 3.0


def timeout_plan(timeout: float | None, now: float) -> tuple[float | None, float | None]:
    """(when to interrupt the ranks, when to give them up) for a cell with ``--timeout``."""
    if not timeout:
        return None, None
    return now + timeout - min(INTERRUPT_GRACE, timeout / 3), now + timeout


class Session:
    """The persistent ranks of one ``%ddp_start``, and what became of them."""

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.gang: Gang | None = None
        self.info: dict[int, dict[str, Any]] = {}
        self.cells = 0
        self.down_reason: str | None = None  # why the ranks are gone, while the session exists

    @property
    def alive(self) -> bool:
        return self.gang is not None and not self.gang.closed

    def start(self) -> None:
        """Start the ranks and wait until every one has its process group up."""
        gang = cell_gang(self.options)
        try:
            gang.start()
            assert gang.pump is not None
            gang.pump.set_target(CellStreams(), (0,))
            got = gang.collect(0)
            if report.incomplete(got, len(gang.ranks)):
                raise report.error_for(got, gang.ranks, "", "", None, hosts=gang.hosts)
        except BaseException as exc:
            gang.stop(clean=False, wait=False)
            if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, DDPError):
                raise report.interrupted(gang.ranks) from None
            raise
        gang.pump.drain()
        self.gang = gang
        self.info = {r: reply.info for r, reply in got.replies.items()}
        self.down_reason = None

    def stop(self) -> None:
        """Stop the ranks (cleanly when they are idle) and remove their logs."""
        if self.gang is not None:
            self.gang.stop(clean=self.alive, timeout=INTERRUPT_GRACE)
            self.gang = None

    def restart(self) -> None:
        """Fresh ranks with the same options: the way out of a stuck or poisoned process group."""
        self.stop()
        self.start()

    def run(
        self, command: Command, cell: CellOptions, cell_source: str = "", label: str = ""
    ) -> dict[int, Reply]:
        """Send ``command`` to every rank and return their replies, or raise what went wrong."""
        gang = self._running()
        assert gang.pump is not None
        gang.pump.set_target(CellStreams(), cell.output)
        seq = gang.send(command)
        interrupt_at, give_up_at = timeout_plan(cell.timeout, time.monotonic())
        got = Collected()
        interrupted = False
        try:
            gang.collect(seq, interrupt_at, got=got)
        except KeyboardInterrupt:
            interrupted = True
        if not interrupted and not report.incomplete(got, len(gang.ranks)):
            gang.pump.drain()
            self.cells += command.kind == "cell"
            return got.replies
        stopping = interrupted or got.expired  # the user wants the cell stopped, not finished
        grace_end = give_up_at if got.expired else None
        stuck = self._settle(gang, seq, got, stopping, grace_end)
        gang.pump.drain()
        if gang.closed:
            gang.abort_others()
            gang.stop(clean=False)
            self.down_reason = self._down_reason(got, stuck)
        raise self._error(got, gang, stuck, interrupted, cell, cell_source, label)

    def _settle(
        self, gang: Gang, seq: int, got: Collected, stopping: bool, grace_end: float | None
    ) -> list[int]:
        """After a failure, interrupt or timeout, bring every rank back to idle or stop them all.

        ``grace_end``: when a timed-out cell's ranks must have answered the interrupt. Returns
        the ranks that had to be stopped because they did not respond.
        """
        if gang.closed or got.aborted:
            return []
        running = [r for r in gang.ranks if r not in got.replies]
        if running and not stopping:
            self._collect_quietly(gang, seq, got, FINISH_GRACE)  # peers of a failed rank may still finish
            running = [r for r in gang.ranks if r not in got.replies]
        if running and not gang.closed:
            gang.interrupt(running)
            grace = INTERRUPT_GRACE if stopping else FAILURE_INTERRUPT_GRACE
            if grace_end is not None:
                grace = max(0.0, grace_end - time.monotonic())
            self._collect_quietly(gang, seq, got, grace)
            running = [r for r in gang.ranks if r not in got.replies]
        if running and not gang.closed:
            gang.stop(clean=False, wait=False)
            return running
        return []

    @staticmethod
    def _collect_quietly(gang: Gang, seq: int, got: Collected, seconds: float) -> None:
        try:
            gang.collect(seq, time.monotonic() + seconds, stop_on_error=False, got=got)
        except KeyboardInterrupt:
            pass  # a second interrupt while settling: settling is already bounded

    @staticmethod
    def _down_reason(got: Collected, stuck: list[int]) -> str:
        if stuck:
            return (
                f"{report.ranks_text(stuck)} did not respond (blocked in a collective?), "
                "so all ranks were stopped"
            )
        if got.death is not None:
            return got.death.describe() + "; the other ranks were stopped"
        if got.aborted:
            return "the ranks of another node failed; this node's ranks were stopped"
        return "the ranks exited"

    def _error(
        self,
        got: Collected,
        gang: Gang,
        stuck: list[int],
        interrupted: bool,
        cell: CellOptions,
        cell_source: str,
        label: str,
    ) -> DDPError:
        restart = (
            "\nThe ranks are gone (their variables too): %ddp_restart starts fresh ones.\n"
            if gang.closed
            else ""
        )
        real = [r for r in got.failures() if not r.interrupted]
        if real or got.death is not None or got.aborted:
            err = report.error_for(
                got, gang.ranks, cell_source, label, cell.timeout, stopped=False, hosts=gang.hosts
            )
            if stuck:
                err.lines.append(f"\n{self.down_reason}\n")
            err.lines.append(restart)
            return err
        what = "interrupted" if interrupted else f"timed out after {cell.timeout:g} s"
        lines = [f"KeyboardInterrupt: {what}\n"]
        for reply in sorted(got.failures(), key=lambda r: r.rank):
            frames = reply.error.frames if reply.error else []
            where = f" at line {frames[-1].lineno}" if frames else ""
            lines.append(f"rank {reply.rank} stopped{where}\n")
        if stuck:
            lines.append(f"{self.down_reason}\n")
        elif not gang.closed:
            lines.append(
                "The ranks kept their variables. If one was inside a collective, the "
                "process group may hang from now on: %ddp_restart.\n"
            )
        return DDPInterrupted(what, lines + [restart])

    def _running(self) -> Gang:
        """The live gang, or the error that says why there is none."""
        if self.gang is None or self.gang.closed:
            reason = self.down_reason or "the ranks were stopped"
            raise DDPError(
                f"no running ranks: {reason}",
                [f"No running ranks: {reason}.\n", "Run %ddp_restart to start fresh ones.\n"],
            )
        return self.gang

    def push(self, objects: dict[str, bytes]) -> None:
        """Bind cloudpickled notebook objects by name in every rank's namespace."""
        self.run(Command("push", objects=objects), CellOptions())

    def pull(self, names: tuple[str, ...]) -> dict[int, dict[str, Any]]:
        """rank -> {name: value} from every rank's namespace (tensors on CPU)."""
        import cloudpickle

        replies = self.run(Command("pull", names=names), CellOptions())
        return {
            r: cloudpickle.loads(reply.value)
            for r, reply in sorted(replies.items())
            if reply.value is not None
        }

    def run_cell(
        self,
        source: str,
        cell: CellOptions,
        objects: dict[str, bytes],
        label: str,
        on_figures: Callable[[dict[int, list[dict[str, Any]]]], None] = lambda figures: None,
    ) -> dict[int, Any] | None:
        """Run a ``%%ddp`` cell; rank -> value of ``--return`` (None when not asked for).

        ``on_figures`` gets each rank's allocator figures for the cell (the kernel's timeline)."""
        import cloudpickle

        check_syntax(source, 1)
        command = Command("cell", source=source, line_offset=1, objects=objects, return_name=cell.return_name)
        replies = self.run(command, cell, "\n" + source, label)
        on_figures(rank_figures(replies))
        if self.options.fsdp:
            print("".join(report.memory_lines(replies)), end="")
        if cell.return_name is None:
            return None
        return {
            r: cloudpickle.loads(reply.value) if reply.value else None for r, reply in sorted(replies.items())
        }

    def save(self, target: Path, model: str, optimizer: str) -> str:
        """Every rank writes its shards into a fresh folder, renamed to ``target`` when all are
        done; what was written, for the cell."""
        self._single_node("%ddp_save")
        pending = checkpoint_files.begin_save(target)
        started = time.perf_counter()
        try:
            command = Command(
                "save",
                names=(model, optimizer),
                path=str(pending.folder),
                replaces=str(pending.replaces or ""),
            )
            done = self._checkpoint(command)
            left = pending.commit()
        except BaseException:
            pending.discard()
            raise
        files, size = checkpoint_files.size(target)
        what = f"model {model!r}" + (f" and optimizer {optimizer!r}" if optimizer else "")
        return (
            f"Saved {what} from {len(self.info)} ranks to {target}: {done['tensors']} tensors, "
            f"{files} files, {format_bytes(size)}, in {time.perf_counter() - started:.1f} s"
            + (" (replacing the older checkpoint there)" if pending.replaces else "")
            + left
        )

    def load(self, path: Path, model: str, optimizer: str) -> str:
        """Every rank reads its part of the checkpoint at ``path`` into the named objects."""
        self._single_node("%ddp_load")
        checkpoint_files.trusted(path)
        started = time.perf_counter()
        done = self._checkpoint(Command("load", names=(model, optimizer), path=str(path)))
        what = f"model {model!r}" + (f" and optimizer {optimizer!r}" if optimizer else "")
        saved = checkpoint_files.saved_ranks(path)
        return (
            f"Loaded {what} on {len(self.info)} ranks from {path} (saved from {saved} ranks): "
            f"{done['tensors']} tensors, {format_bytes(done['bytes'])}, in {time.perf_counter() - started:.1f} s"
        )

    def _checkpoint(self, command: Command) -> dict[str, Any]:
        """Run a save or load on every rank; the first rank's reason it could not, as an error."""
        replies = self.run(command, CellOptions())
        problems = sorted(
            (reply.info.get("secondary", False), r, reply.info["problem"])
            for r, reply in replies.items()
            if "problem" in reply.info
        )
        if problems:  # a rank's own reason first, before "another rank could not"
            _, rank, problem = problems[0]
            verb = "saved" if command.kind == "save" else "loaded"
            raise DDPError(
                problem,
                [f"{problem}\n", f"(rank {rank}; nothing was {verb}; the ranks keep their variables)\n"],
            )
        return replies[min(replies)].info["checkpoint"]

    def _single_node(self, magic: str) -> None:
        if self.options.nnodes > 1:
            raise BadInput(
                f"{magic} works with the ranks of one node; across nodes call "
                "torch.distributed.checkpoint.save/load in a %%ddp cell, on storage every node shares"
            )

    def status(self) -> str:
        """What %ddp_status prints."""
        opts = self.options
        how = "srun (--slurm)" if opts.slurm else f"start method {opts.start_method}"
        head = f"DDP session: {opts.nproc} ranks per node, {opts.nnodes} node(s), {how}"
        if not self.alive:
            return f"{head}\n  stopped: {self.down_reason or 'the ranks are gone'}; %ddp_restart\n"
        assert self.gang is not None
        lines = [head]
        if opts.slurm:
            from .slurm_gang import SlurmGang

            assert isinstance(self.gang, SlurmGang)
            lines.append(f"  {self.gang.placement()}")
        lines.append(f"  cells run: {self.cells}; rank logs: {self.gang.log_dir}")
        for rank in self.gang.ranks:
            info = self.info.get(rank, {})  # pid and host as the rank saw them (on its own node)
            lines.append(
                f"  rank {rank}: pid {info.get('pid')}, {info.get('backend')} on "
                f"{info.get('device')}, host {info.get('host')}"
            )
        return "\n".join(lines) + "\n"
