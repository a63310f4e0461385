"""``jupyter gpu status --slurm``: this user's jupyter_gpu jobs and job steps in Slurm's queue
(``ddp/slurm_queue.py``), as a table or JSON; without Slurm, one line and exit code 1."""

from __future__ import annotations

import argparse
import dataclasses

from ..analysis.units import format_duration
from ..ddp.slurm import JOB_NAME, SlurmError
from ..ddp.slurm_queue import QueueEntry, queued
from .common import EXIT_OK, CliError, format_table, print_json


def _time(entry: QueueEntry, unlimited: str) -> str:
    limit = entry.time_limit_seconds
    return (
        f"{format_duration(entry.elapsed_seconds)} / {unlimited if limit is None else format_duration(limit)}"
    )


def _job_row(job: QueueEntry) -> list[str]:
    nodes = f"{job.node_count}" if job.node_count is not None else ""
    nodes += f" ({job.nodes})" if job.nodes else ""
    return [job.id, job.state, nodes, _time(job, "no limit"), job.reason or ""]


def render(jobs: list[QueueEntry], steps: list[QueueEntry]) -> str:
    """The jobs, then the steps (each a ``%%ddp_launch --slurm`` launch's ranks)."""
    if not jobs and not steps:
        return f"No Slurm jobs or job steps of yours named {JOB_NAME} in the queue."
    lines = [f"Slurm jobs named {JOB_NAME} (%ddp_start --slurm --alloc)"]
    if jobs:
        lines += format_table(
            ["Job", "State", "Nodes", "Elapsed / limit", "Waiting for"],
            [_job_row(job) for job in jobs],
            [True, False, False, False, False],
        )
    else:
        lines.append("none")
    lines += ["", f"Job steps named {JOB_NAME} (the ranks of --slurm launches and sessions)"]
    if steps:
        lines += format_table(
            ["Step", "State", "Nodes", "Elapsed / limit"],
            [[step.id, step.state, step.nodes, _time(step, "the job's")] for step in steps],
            [True, False, False, False],
        )
    else:
        lines.append("none")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        jobs, steps = queued()
    except SlurmError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json(
            {"jobs": [dataclasses.asdict(j) for j in jobs], "steps": [dataclasses.asdict(s) for s in steps]}
        )
    else:
        print(render(jobs, steps))
    return EXIT_OK
