"""One-shot ``%%ddp_launch`` (a cell on N fresh ranks) and its line form (a script, like torchrun)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import report
from .errors import BadInput, DDPError
from .gang import Gang
from .options import CellOptions, WorkerOptions
from .outcome import Collected
from .output import CellStreams
from .protocol import Command, Reply, WorkerConfig


def pack(user_ns: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, bytes]:
    """cloudpickle each pushed object on its own, so an error names the one that failed."""
    import cloudpickle

    objects = {}
    for name in names:
        if name not in user_ns:
            raise BadInput(f"--push {name}: name {name!r} is not defined in the notebook")
        try:
            objects[name] = cloudpickle.dumps(user_ns[name])
        except Exception as exc:
            msg = f"cannot send {name!r} to the ranks: {type(exc).__name__}: {exc}"
            raise DDPError(
                msg, [msg + "\n", "Create it inside the cell, or push what it is made from.\n"]
            ) from None
    return objects


def check_syntax(source: str, line_offset: int) -> None:
    """Fail before any rank starts when the cell cannot compile (numbers as in the cell)."""
    compile("\n" * line_offset + source, "<ddp-cell>", "exec", dont_inherit=True)


def _give_up(gang: Gang, error: DDPError) -> DDPError:
    """Stop the ranks without waiting for them, keep their logs and say where they are."""
    gang.abort_others()
    gang.keep_logs = True
    gang.stop(clean=False, wait=False)
    error.lines.append(f"\nEvery rank's output: {gang.log_dir}\n")
    return error


def cell_gang(options: WorkerOptions) -> Gang:
    """Ranks that run ``worker.main`` and take cells, pushes and pulls from the channel."""
    from . import worker

    def args(gang: Gang) -> tuple[Any, ...]:
        assert gang.channel is not None
        return (
            WorkerConfig(
                gang.channel.path,
                gang.key,
                gang.store_path,
                os.getpid(),
                list(sys.path),
                os.getcwd(),
                options,
                gang.channel.pin,
            ),
        )

    if options.slurm:
        from .slurm_gang import SlurmGang

        return SlurmGang(options, args)
    return Gang(options, worker.main, args)


def rank_figures(replies: Mapping[int, Reply]) -> dict[int, list[dict[str, Any]]]:
    """rank -> what its allocator did in the cell, as each rank measured it."""
    return {rank: reply.info.get("cell_gpus", []) for rank, reply in replies.items()}


def run_cell(
    options: WorkerOptions,
    cell: CellOptions,
    source: str,
    objects: dict[str, bytes],
    label: str,
    on_figures: Callable[[dict[int, list[dict[str, Any]]]], None] = lambda figures: None,
) -> dict[int, Any]:
    """Run ``source`` on fresh ranks; return rank -> value of ``cell.return_name``.

    ``on_figures`` gets each rank's allocator figures for the cell (the kernel's timeline)."""
    import cloudpickle

    check_syntax(source, 1)
    target = CellStreams()
    deadline = time.monotonic() + cell.timeout if cell.timeout else None
    gang = cell_gang(options)
    command = Command("cell", source=source, line_offset=1, objects=objects, return_name=cell.return_name)
    try:
        gang.start(preset=[command])  # queued before the ranks exist: no extra round trip
        assert gang.pump is not None
        gang.pump.set_target(target, cell.output)
        for seq in (0, 1):  # 0: process group up (or not); 1: the cell
            got = gang.collect(seq, deadline)
            if report.incomplete(got, len(gang.ranks)):
                raise _give_up(
                    gang,
                    report.error_for(
                        got, gang.ranks, "\n" + source if seq else "", label, cell.timeout, hosts=gang.hosts
                    ),
                )
        gang.stop(clean=True)
        on_figures(rank_figures(got.replies))
        if options.fsdp:
            print("".join(report.memory_lines(got.replies)), end="")
        return {
            r: cloudpickle.loads(got.replies[r].value) if got.replies[r].value else None for r in gang.ranks
        }
    except DDPError:
        raise  # ours, already explained (DDPInterrupted is a KeyboardInterrupt too)
    except KeyboardInterrupt:
        gang.abort_others()
        gang.stop(clean=False, wait=False)
        raise report.interrupted(gang.ranks) from None
    finally:
        if not gang.closed:
            gang.stop(clean=False, wait=False)


def run_script(
    options: WorkerOptions,
    script: str,
    script_args: list[str],
    output: tuple[int, ...] | None,
    timeout: float | None,
) -> None:
    """Run ``python script args`` on every rank with torchrun's environment."""
    if not os.path.isfile(script):
        raise BadInput(f"no such script: {script}")
    target = CellStreams()
    kernel_pid = str(os.getpid())
    # The ranks run `python -m` this package's runner: make it importable however the kernel found it.
    root = str(Path(__file__).resolve().parents[2])
    pythonpath = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    gang = Gang(
        options,
        sys.executable,
        lambda gang: (
            "-u",
            "-m",
            "jupyter_gpu.ddp.script",
            kernel_pid,
            script,
            *script_args,
        ),
        env={"PYTHONPATH": pythonpath},
        commands=False,
    )
    deadline = time.monotonic() + timeout if timeout else None
    try:
        gang.start()
        assert gang.pump is not None
        gang.pump.set_target(target, output)
        try:
            death = gang.wait_for_exit(deadline)
        except TimeoutError:
            gang.stop(clean=False, wait=False)
            raise report.error_for(Collected(expired=True), gang.ranks, "", "", timeout) from None
        if death is not None:
            raise _give_up(
                gang, report.error_for(Collected(death=death), gang.ranks, "", "", None, stopped=False)
            )
        gang.stop(clean=False)
    except DDPError:
        raise  # ours, already explained (DDPInterrupted is a KeyboardInterrupt too)
    except KeyboardInterrupt:
        gang.stop(clean=False, wait=False)
        raise report.interrupted(gang.ranks) from None
    finally:
        if not gang.closed:
            gang.stop(clean=False, wait=False)
