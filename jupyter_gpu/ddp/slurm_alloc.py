"""The kernel's own Slurm allocation, asked for from a login node (``--slurm --alloc "..."``).

``salloc --no-shell`` asks for it: salloc waits in the queue, prints the job id at once and
exits as soon as the nodes are granted, and runs nothing on them, so every launch's ``srun``
then has the nodes to itself. (``sbatch`` would need a batch script sleeping on the first node
to hold the job, and its output file somewhere.) While the request waits, ``squeue --start``
says why, where in the queue and, when the scheduler has planned it, when it should start.

Once granted the allocation belongs to the kernel (``slurm.allocation()`` returns it) until
``release()`` (``%ddp_stop``, the extension's unload, the kernel's exit) cancels it. A watcher
process outside the kernel's process group, started the moment the job has an id, cancels it
when the kernel is gone however it died (SIGKILL included): no job is left behind.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from ..analysis.units import format_duration
from .errors import DDPInterrupted
from .lifeline import dies_with_parent
from .slurm import JOB_NAME, QUERY_TIMEOUT_S, Allocation, SlurmError, scontrol
from .slurm_watch import cancel, start_watcher, stop_watcher

# squeue is asked once a second at first, then less and less often: a job that waits for
# minutes is looked at every 10 s, as Slurm's docs ask of tools that poll slurmctld.
POLL_FIRST_S = 1.0
POLL_MAX_S = 10.0
STOP_S = 10.0  # salloc ends within a second of SIGINT
# Past this, backfill's estimate means "not within the planning window" (it says now + 1 year)
EARLIEST_UNPLANNED_S = 300 * 86400.0
# salloc's own words for the job id: "Pending job allocation 7", "Granted job allocation 7"
_JOB_ID = re.compile(r"job allocation (\d+)")
# Options that would break the request: we name the job, we read salloc's messages, and
# these ask nothing of Slurm.
_REFUSED = {
    "-J": "the job is named " + JOB_NAME,
    "--job-name": "the job is named " + JOB_NAME,
    "-Q": "the job id is read from salloc's messages",
    "--quiet": "the job id is read from salloc's messages",
    "-h": "it asks for no allocation",
    "--help": "it asks for no allocation",
    "--usage": "it asks for no allocation",
    "-V": "it asks for no allocation",
    "--version": "it asks for no allocation",
}
_NO_VALUE = set("vQhVHkOs")  # salloc's short options that take no value
SAID_LINES = 200  # salloc's lines kept for its error
SAID_LINE_CHARS = 4096
# scontrol's TresPerNode for --gpus-per-node=4 or --gres=gpu:a100:4: "gres:gpu:4" (Slurm 22.05),
# "gres/gpu:a100:4" (23.02 on)
_GPUS = re.compile(r"\bgres[:/]gpu(?::[^:,=]+)?:(\d+)")
_ENDED = {  # a job state that ends the allocation, in words
    "TIMEOUT": "its time limit was reached",
    "CANCELLED": "it was cancelled",
    "NODE_FAIL": "a node of it failed",
    "PREEMPTED": "it was preempted",
    "COMPLETED": "it completed",
    "COMPLETING": "it is ending",
    "FAILED": "it failed",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "its deadline passed",
    "OUT_OF_MEMORY": "it ran out of memory",
    "FORGOTTEN": "too long ago for Slurm to say why",
}


@dataclass(frozen=True)
class Held:
    """The allocation this kernel holds, what it was asked with, and its watcher."""

    allocation: Allocation
    gpus_per_node: int
    request: tuple[str, ...]
    watcher: subprocess.Popen[bytes]
    pid: int = field(default_factory=os.getpid)  # the kernel's: a child it forks holds nothing


_held: Held | None = None


def salloc_options(text: str) -> tuple[str, ...]:
    """``--alloc``'s value as salloc's arguments (shell quoting), refusing the ones that break it."""
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise SlurmError(f"--alloc {text!r}: {exc}") from None
    if not words:
        raise SlurmError('--alloc needs salloc options, e.g. --alloc "--nodes=2 --time=30"')
    for word in words:
        if refused := _refused(word):
            name = word.partition("=")[0]
            shown = f"{name} ({refused})" if name.startswith("--") and name != refused else refused
            raise SlurmError(f"--alloc: leave out {shown}: {_REFUSED[refused]}")
    return words


def _refused(word: str) -> str | None:
    """The refused option ``word`` is to salloc's getopt, which takes any unique prefix of a long
    option (``--quie``) and runs short ones together (``-vQ``, but ``-pshared`` is -p's value)."""
    if word.startswith("--"):
        name = word.partition("=")[0]
        return next(
            (r for r in _REFUSED if len(name) > 2 and r.startswith("--") and r.startswith(name)), None
        )
    if re.match(r"-\w", word):
        for letter in word[1:]:
            if f"-{letter}" in _REFUSED:
                return f"-{letter}"
            if letter not in _NO_VALUE:
                return None  # the rest is this option's value
    return None


def request(options: tuple[str, ...], show: Callable[[str], None]) -> Allocation:
    """The kernel's allocation, asked of Slurm with salloc ``options``; ``show`` gets the queue
    line while it waits. The same request again (a cell run twice) gets the one held; an
    interrupt while waiting cancels it."""
    if _held is not None:
        if _held.request == options:
            return _held.allocation
        raise SlurmError(
            f"--alloc: this kernel holds Slurm job {_held.allocation.job_id} already (--alloc "
            f"{shlex.join(_held.request)!r}); %ddp_stop gives it back first"
        )
    if os.environ.get("SLURM_JOB_ID"):
        raise SlurmError(
            f"--alloc: this kernel runs in Slurm job {os.environ['SLURM_JOB_ID']} already; "
            "--slurm uses that one, leave out --alloc"
        )
    if shutil.which("salloc") is None:
        raise SlurmError("--alloc: no Slurm on this machine (salloc is not on PATH)")
    return _Request(options, show).wait()


class _Request:
    """One salloc, its messages read on a thread, and squeue asked while it waits."""

    def __init__(self, options: tuple[str, ...], show: Callable[[str], None]) -> None:
        self.options, self.show = options, show
        self.started = time.monotonic()
        self.said: collections.deque[str] = collections.deque(maxlen=SAID_LINES)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.job: str | None = None
        self.watcher: subprocess.Popen[bytes] | None = None
        try:
            self.salloc = subprocess.Popen(
                # ours last: they win over anything salloc reads as the same option
                ["salloc", *options, "--no-shell", f"--job-name={JOB_NAME}"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # an interrupt is the kernel's to handle
                # the kernel dying before salloc printed a job id (no watcher yet): salloc gives
                # up its request, as on an interrupt
                preexec_fn=dies_with_parent(signal.SIGINT),
            )
        except OSError as exc:
            raise SlurmError(f"--alloc: cannot run salloc: {exc}") from None
        assert self.salloc.stdout is not None
        threading.Thread(target=_read, args=(self.salloc.stdout, self.lines), daemon=True).start()

    def wait(self) -> Allocation:
        global _held
        try:
            self._until_salloc_exits()
            code = self.salloc.wait()
            job, watcher = self.job, self.watcher
            if code or job is None or watcher is None:
                raise SlurmError(f"salloc refused the allocation: {_said(list(self.said), code)}")
            fields = job_fields(job)
            nodes = tuple(scontrol("show", "hostnames", fields.get("NodeList", "")).split())
        except KeyboardInterrupt:
            self._cancel()
            msg = "interrupted; " + (
                f"Slurm job {self.job} cancelled while it waited"
                if self.job
                else "salloc stopped before a job"
            )
            raise DDPInterrupted(msg, [f"KeyboardInterrupt: {msg}\n"]) from None
        except BaseException:
            self._cancel()
            raise
        _held = Held(Allocation(job, nodes), gpus_in(fields.get("TresPerNode", "")), self.options, watcher)
        waited = format_duration(time.monotonic() - self.started)
        self.show(f"Slurm job {job} granted after {waited}: {','.join(nodes)}")
        return _held.allocation

    def _until_salloc_exits(self) -> None:
        interval, next_poll = POLL_FIRST_S, float("inf")
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, min(next_poll - time.monotonic(), POLL_MAX_S)))
            except queue.Empty:
                if self.job is not None and time.monotonic() >= next_poll:
                    self.show(queue_line(self.job, time.monotonic() - self.started))
                    interval = min(2 * interval, POLL_MAX_S)
                    next_poll = time.monotonic() + interval
                continue
            if line is None:
                return
            self.said.append(line[:SAID_LINE_CHARS])
            found = _JOB_ID.search(line)
            if found and self.job is None:
                self.job = found[1]
                self.watcher = start_watcher(self.job)
                next_poll = time.monotonic() + POLL_FIRST_S / 2  # a grant usually comes first

    def _cancel(self) -> None:
        """No job left behind: salloc told to give up (it cancels what it waits for), the job
        id it printed cancelled, the watcher ended."""
        if self.salloc.poll() is None:
            self.salloc.send_signal(signal.SIGINT)
            try:
                self.salloc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.salloc.kill()
                self.salloc.wait()
        with contextlib.suppress(queue.Empty):  # salloc has exited: its last lines are there
            while self.job is None and (line := self.lines.get(timeout=STOP_S)) is not None:
                found = _JOB_ID.search(line)
                self.job = found[1] if found else None
        if self.job is not None and cancel(self.job) is None and self.watcher is not None:
            stop_watcher(self.watcher)


def _read(pipe: IO[str], lines: queue.Queue[str | None]) -> None:
    try:
        for line in pipe:
            lines.put(line.rstrip("\n"))
    finally:  # whatever happens to the pipe, the wait ends
        lines.put(None)


def _said(lines: list[str], code: int | None) -> str:
    """salloc's complaint in one line: its first error, or what it said last."""
    errors = [line for line in lines if "error" in line or "fatal" in line or "unrecognized" in line]
    return (errors or lines or [f"salloc exited with code {code}"])[0].strip()


def job_fields(job: str) -> dict[str, str]:
    """``scontrol show job``'s Key=Value fields (values without spaces are all that is read)."""
    return dict(re.findall(r"(\w[\w/:]*)=(\S*)", scontrol("show", "job", "-o", job)))


def gpus_in(tres_per_node: str) -> int:
    """GPUs per node in scontrol's TresPerNode (0 when the job asked for none per node)."""
    found = _GPUS.search(tres_per_node)
    return int(found[1]) if found else 0


def held_gpus_per_node() -> int:
    """GPUs on each node of the allocation --alloc got (0 without one): the default ranks per node."""
    return _held.gpus_per_node if _held is not None else 0


def queue_line(job: str, waited: float) -> str:
    """Where the job waits: Slurm's reason, its place among its partition's pending jobs (by
    priority, as the scheduler takes them), and the start backfill plans, when it has one."""
    row = _squeue("--start", "-j", job, "-o", "%T|%r|%P|%S").strip()
    if not row:
        return f"Slurm job {job}: starting (waited {format_duration(waited)})"
    state, reason, partition, start = (row.split("|") + ["", "", ""])[:4]
    pending = _squeue("-t", "PENDING", "-p", partition, "--sort=-p,i", "-o", "%i").split()
    place = f", {pending.index(job) + 1} of {len(pending)} waiting in {partition}" if job in pending else ""
    return (
        f"Slurm job {job} {state.lower()} ({reason}){place}{_planned(start)}, "
        f"waited {format_duration(waited)}"
    )


def _planned(start: str) -> str:
    try:
        at = time.mktime(time.strptime(start, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return ""  # N/A: not planned yet
    ahead = at - time.time()
    if ahead > EARLIEST_UNPLANNED_S:
        return ""
    return f", expected to start at {start.replace('T', ' ')} (in {format_duration(max(0.0, ahead))})"


def _squeue(*args: str) -> str:
    try:
        done = subprocess.run(
            ["squeue", "-h", *args], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""  # the queue line waits for the next poll
    return done.stdout if done.returncode == 0 else ""


def held() -> Allocation | None:
    """The allocation this kernel holds, None when it holds none; a SlurmError in Slurm's words
    when the job has ended under it (time limit, scancel, a failed node)."""
    global _held
    if _held is None:
        return None
    job = _held.allocation.job_id
    try:
        fields = job_fields(job)
    except SlurmError as exc:
        if "Invalid job id" not in str(exc):
            raise
        fields = {"JobState": "FORGOTTEN"}  # ended long enough ago (MinJobAge) to be purged
    state, reason = fields.get("JobState", ""), fields.get("Reason", "None")
    if state == "RUNNING":
        return _held.allocation
    why = f" (Slurm's reason: {reason})" if reason not in ("None", "") else ""
    if state in _ENDED:
        stop_watcher(_held.watcher)
        _held = None
        raise SlurmError(f"Slurm job {job}, this kernel's allocation, has ended: {_ENDED[state]}{why}")
    raise SlurmError(f"Slurm job {job}, this kernel's allocation, is {state}{why}: srun waits for RUNNING")


def describe() -> str | None:
    """The allocation held, in a line for ``%ddp_status``; None when none is."""
    if _held is None:
        return None
    nodes = _held.allocation.nodes
    return (
        f"Slurm job {_held.allocation.job_id} held by this kernel (--alloc {shlex.join(_held.request)!r}): "
        f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} {','.join(nodes)}"
    )


def release() -> str | None:
    """Give the allocation back (scancel): what happened in a line, None when none was held.
    Where scancel fails the watcher stays, to cancel it when the kernel exits."""
    global _held
    if _held is None:
        return None
    job, watcher, _held = _held.allocation.job_id, _held.watcher, None
    failed = cancel(job)
    if failed is not None:
        raise SlurmError(f"scancel {job}: {failed} (it is cancelled again when the kernel exits)")
    stop_watcher(watcher)
    return f"Slurm job {job} released"


def _release_at_exit() -> None:
    if _held is None or _held.pid != os.getpid():  # a child forked by the kernel's code: not its job
        return
    try:
        release()
    except SlurmError:
        pass  # the watcher cancels it once this process is gone


atexit.register(_release_at_exit)
