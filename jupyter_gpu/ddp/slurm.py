"""What a kernel inside a Slurm allocation asks Slurm: its job, the job's nodes and their
addresses, the ``srun`` command line, and what srun's own messages mean.

Only Slurm's commands (``scontrol``, ``srun``, ``squeue``, ``scancel``) are used; nothing is
started on a node but the job step. Every error quotes Slurm's own words.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .errors import BadInput

JOB_NAME = "jupyter_gpu"  # the name of jupyter_gpu's Slurm jobs and job steps: `jupyter gpu status --slurm` lists them
QUERY_TIMEOUT_S = 30.0  # scontrol answers at once unless slurmctld is down (then it says so)
# srun's summary of a task that ended badly: "srun: error: n2: task 3: Exited with exit code 1"
# (or "tasks 2-3: Killed" for several).
# Slurm's own lines, anchored: a rank printing the same words mid-line is not Slurm speaking.
_TASK_END = re.compile(r"^srun: error: (\S+): tasks? (\d+)(?:-\d+)?: (.+)")
_SLURM_LINE = re.compile(r"^(?:srun|slurmstepd(?:-\S+)?): error: ")
_NODE_FAILURE = re.compile(r"^srun: error: Node failure on (\S+)")
_STEP = re.compile(r"\*\*\* STEP (\d+)\.")
# scontrol show node -o: "... Reason=Not responding [slurm@2026-12-02T14:52:26]" (last, or before another Key=)
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\]]*\])?(?= [A-Z]\w*=|$)")
_EXIT_CODE = re.compile(r"Exited with exit code (\d+)")
# srun's words for the signals a task can die of
_SIGNALS = {
    "Killed": "SIGKILL",
    "Terminated": "SIGTERM",
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
}


class SlurmError(BadInput):
    """Slurm is missing, this kernel is not in an allocation, or Slurm refused: one line."""


@dataclass(frozen=True)
class Allocation:
    """The job this kernel runs in, and its nodes in Slurm's order."""

    job_id: str
    nodes: tuple[str, ...]


def allocation() -> Allocation:
    """The kernel's allocation: the one ``--alloc`` got it (``slurm_alloc.py``), else the job
    it runs in, from the variables ``salloc``/``sbatch`` set."""
    if shutil.which("srun") is None:
        raise SlurmError("--slurm: no Slurm on this machine (srun is not on PATH)")
    from .slurm_alloc import held  # it imports this module

    own = held()
    if own is not None:
        return own
    job = os.environ.get("SLURM_JOB_ID")
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not job or not nodelist:
        raise SlurmError(
            "--slurm runs inside a Slurm allocation and this kernel is in none (SLURM_JOB_ID is not "
            "set): start Jupyter inside one, e.g. `salloc -N2 --gpus-per-node=4`, then the server, "
            'or ask Slurm for one with --alloc "-N2 --gpus-per-node=4"'
        )
    nodes = tuple(scontrol("show", "hostnames", nodelist).split())
    return Allocation(job, nodes)


def scontrol(*args: str) -> str:
    """``scontrol``'s output; its own message as a SlurmError when it fails."""
    return command("scontrol", *args)


def command(name: str, *args: str) -> str:
    """The output of Slurm's command ``name``; its own message as a SlurmError when it fails."""
    try:
        done = subprocess.run(
            [name, *args], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmError(f"{name} {' '.join(args)}: {exc}") from None
    if done.returncode:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise SlurmError(f"{name} {' '.join(args)}: {said[-1] if said else f'exit code {done.returncode}'}")
    return done.stdout


def node_address(node: str) -> str:
    """The address Slurm reaches ``node`` at (its NodeAddr): where rank 0's store listens."""
    found = re.search(r"\bNodeAddr=(\S+)", scontrol("show", "node", "-o", node))
    return found[1] if found else node


def address_towards(peer: str) -> str:
    """This machine's address on the route to ``peer``: the one the nodes can reach it at."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(peer), 9))  # UDP: picks the route, sends nothing
        return str(probe.getsockname()[0])


def gpus_per_node() -> int:
    """GPUs the job has on each node (0 when it asked for none): the default ranks per node."""
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = os.environ.get(name, "").rpartition(":")[2]  # "a100:4" names the type
        if value.isdigit():
            return int(value)
    from .slurm_alloc import held_gpus_per_node  # an allocation of --alloc: no variables

    return held_gpus_per_node()


def srun_argv(job: str, nodes: int, per_node: int) -> list[str]:
    """srun's command line: one task per rank, block-placed, a bad exit ending the step. The
    rank's secrets are not on it: they travel in srun's environment."""
    return [
        "srun",
        f"--jobid={job}",
        f"--job-name={JOB_NAME}",
        f"--nodes={nodes}",
        f"--ntasks={nodes * per_node}",
        f"--ntasks-per-node={per_node}",
        "--distribution=block",
        "--kill-on-bad-exit=1",
        "--label",
        "--input=none",
        sys.executable,
        "-u",
        "-m",
        "jupyter_gpu.ddp.slurm_rank",
    ]


@dataclass(frozen=True)
class TaskEnd:
    """How srun says a task ended."""

    node: str
    rank: int
    exitcode: int
    signal_name: str | None


def task_ends(lines: list[str]) -> list[TaskEnd]:
    """The tasks srun reported as ended badly, in its order."""
    ends = []
    for line in lines:
        found = _TASK_END.match(line)
        if found is None:
            continue
        node, rank, how = found[1], int(found[2]), found[3].strip()
        code = _EXIT_CODE.search(how)
        ends.append(TaskEnd(node, rank, int(code[1]) if code else 1, _SIGNALS.get(how)))
    return ends


def node_reason(node: str) -> str | None:
    """Why Slurm took ``node`` out of service (its Reason, "Not responding" for a node that
    stopped answering), without the who-and-when Slurm appends; None when it gives none."""
    try:
        said = scontrol("show", "node", "-o", node).strip()
    except SlurmError:
        return None
    found = _REASON.search(said)
    return found[1] if found else None


def step_failure(lines: list[str], reason_of: Callable[[str], str | None] = node_reason) -> str | None:
    """Why the whole step ended, in Slurm's words, when not because of a rank: a node failed
    (named, with Slurm's reason for it from ``reason_of``), the job's time limit came, srun
    refused the step."""
    said = [line.strip() for line in lines if _SLURM_LINE.match(line)]
    for line in said:
        if found := _NODE_FAILURE.match(line):
            reason = reason_of(found[1])
            return f"node {found[1]} failed and Slurm ended the job step" + (
                f"; Slurm's reason: {reason}" if reason else f": {line}"
            )
    for line in said:
        if "DUE TO TIME LIMIT" in line:
            step = _STEP.search(line)
            job = f"job {step[1]}" if step else "the job"
            return f"{job} reached its time limit and Slurm cancelled the step: {line}"
        if "NODE FAILURE" in line:
            return f"a node of the job failed and Slurm ended the job step: {line}"
        if "Unable to create step" in line or "Only allocated" in line or "Invalid" in line:
            return f"srun refused the job step: {line}"
    return None


def step_state(step: str) -> str:
    """The job step's state as squeue tells it (RUNNING, ...), or "gone" once it has ended."""
    try:
        said = command("squeue", "-h", f"--steps={step}", "-O", "StepState").split()
    except SlurmError as exc:
        return f"unknown ({exc})"
    return said[0] if said else "gone"


def signal_step(step: str, name: str) -> None:
    """Send signal ``name`` (INT, ...) to every task of the job step ``step`` (job.step)."""
    command("scancel", "--quiet", f"--signal={name}", step)
