"""This user's jupyter_gpu work in Slurm's queue: the jobs and the job steps named
``slurm.JOB_NAME`` (``--alloc`` names its jobs so, ``--slurm`` launches their steps), as
``squeue --me --name`` says.

Not ``squeue --json``: in Slurm 22.05 it ignores every filter and lists no steps, and its
schema is versioned by Slurm release.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from .slurm import JOB_NAME, QUERY_TIMEOUT_S, SlurmError

_SEP = "\x1f"  # between fields: no job name, node list or reason holds it
JOB_FIELDS = ("JobID", "Name", "State", "NumNodes", "NodeList", "TimeUsed", "TimeLimit", "Reason")
STEP_FIELDS = ("StepId", "StepName", "StepState", "Nodes", "TimeUsed", "TimeLimit")


@dataclass(frozen=True)
class QueueEntry:
    """A job or a job step; times in seconds (``time_limit_seconds`` None: no limit)."""

    id: str
    name: str
    state: str
    node_count: int | None  # a job's (asked for, while it waits); None for a step
    nodes: str  # Slurm's node list, "n[1-2]"; empty while a job waits
    elapsed_seconds: int | None
    time_limit_seconds: int | None
    reason: str | None  # why a job waits (Priority, Resources, ...); None when it runs


def slurm_seconds(text: str) -> int | None:
    """Slurm's ``[days-][hours:]minutes:seconds`` in seconds; None for UNLIMITED and the like."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not (days.isdigit() or not days) or len(parts) < 2 or not all(p.isdigit() for p in parts):
        return None
    seconds = sum(int(p) * 60**power for power, p in enumerate(reversed(parts)))
    return seconds + int(days or 0) * 86400


def squeue_argv(steps: bool) -> list[str]:
    """``squeue`` listing this user's ``JOB_NAME`` jobs (or steps), one a line."""
    listing = ["--steps"] if steps else []
    fields = STEP_FIELDS if steps else JOB_FIELDS
    return [
        "squeue",
        "--me",
        *listing,
        f"--name={JOB_NAME}",
        "--noheader",
        "--Format=" + ",".join(f"{f}:{_SEP}" for f in fields),
    ]


def parse(text: str, steps: bool) -> list[QueueEntry]:
    """squeue's lines for ``squeue_argv(steps)``, as entries."""
    fields = STEP_FIELDS if steps else JOB_FIELDS
    entries = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(_SEP)]
        if len(cells) < len(fields):
            continue
        got = dict(zip(fields, cells))
        count, reason = got.get("NumNodes", ""), got.get("Reason", "None")
        entries.append(
            QueueEntry(
                id=got["StepId" if steps else "JobID"],
                name=got["StepName" if steps else "Name"],
                state=got["StepState" if steps else "State"],
                node_count=int(count) if count.isdigit() else None,
                nodes=got["Nodes" if steps else "NodeList"],
                elapsed_seconds=slurm_seconds(got["TimeUsed"]),
                time_limit_seconds=slurm_seconds(got["TimeLimit"]),
                reason=None if reason in ("", "None") else reason,
            )
        )
    return entries


def _squeue(steps: bool) -> list[QueueEntry]:
    argv = squeue_argv(steps)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"squeue: {exc}") from None
    if done.returncode:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise SlurmError(said[-1] if said else f"squeue exited with code {done.returncode}")
    return parse(done.stdout, steps)


def queued() -> tuple[list[QueueEntry], list[QueueEntry]]:
    """This user's jupyter_gpu jobs and job steps; SlurmError in one line without Slurm."""
    if shutil.which("squeue") is None:
        raise SlurmError("no Slurm on this machine (squeue is not on PATH)")
    # --steps --name lists the other steps (batch, extern) of jobs so named too
    return _squeue(steps=False), [step for step in _squeue(steps=True) if step.name == JOB_NAME]
