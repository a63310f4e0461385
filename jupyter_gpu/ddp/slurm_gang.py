"""The ranks of a ``--slurm`` launch: one srun job step across the nodes of the kernel's
allocation instead of ``Gang``'s local processes; the channel, commands and replies are
``Gang``'s own.

* srun starts one task per rank, block-placed (ranks k*n .. k*n+n-1 on the job's k-th node);
  Slurm's task ids become RANK, LOCAL_RANK and WORLD_SIZE (``slurm_rank.py``); the process
  group meets at a store that rank 0 hosts on the first node's NodeAddr (env://);
* the channel is TLS on this machine's address towards that node (``tls.py``); its key and
  the certificate's fingerprint reach the ranks in srun's environment, not its command line;
* srun forwards the tasks' output (``--label``); threads split it into per-rank files that the
  usual ``LogPump`` tails into the cell, lines marked with node and rank; that path is slower
  than the replies, so each rank marks the end of a command's output on both streams and the
  replies count once the marks are in (else a persistent cell's last lines would land in the next);
* a rank that exits badly ends the step (``--kill-on-bad-exit``); srun's report of it, or of a
  refused step, a dead node or the time limit, becomes the error; stopping is SIGTERM to srun,
  which cancels the step, and so is the kernel's end: srun gets SIGTERM from Linux when the
  kernel exits or is killed (``lifeline.dies_with_parent``), so no step outlives its kernel;
* an interrupt is ``scancel --signal=INT`` to the step (its id comes with the ranks' first
  replies): each rank running a cell raises KeyboardInterrupt, an idle one ignores it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import secrets
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from . import slurm
from .channel import KernelEnd
from .errors import DDPError
from .gang import Gang
from .lifeline import dies_with_parent
from .options import WorkerOptions
from .outcome import Collected, Death
from .output import LogPump, tail
from .protocol import Command
from .slurm_rank import CONFIG_ENV, REPLIED_MARK, encode

# rank 0's store: a port below Linux's ephemeral range (no clash with outgoing connections); any
# user on the node can still bind it first, and then the step fails at its start (docs/security.md: Slurm)
MASTER_PORTS = (20000, 30000)
# srun cancels the step on SIGTERM and waits for it (Slurm's KillWait, 30 s by default)
SRUN_STOP_S = 60.0
_LABEL = re.compile(r"\s*(\d+): ")  # srun --label: "3: text", padded when there are 10+ tasks
SAID_LINES = 200  # srun's own lines kept for the error
_MARK_SEQ = re.compile(r"[0-9]{1,9}")  # the command number after a rank's end-of-output mark
OUTPUT_WAIT_S = 5.0  # a reply's output marks are due within milliseconds; srun gone, they never come


class SlurmGang(Gang):
    """The ranks of one srun job step; ``hosts`` says the node of each."""

    def __init__(self, options: WorkerOptions, args: Callable[[Gang], tuple[Any, ...]]) -> None:
        super().__init__(options, "srun", args)
        self._srun: subprocess.Popen[bytes] | None = None
        self._said: collections.deque[str] = collections.deque(maxlen=SAID_LINES)
        self._readers: list[threading.Thread] = []
        self._marks: list[dict[int, int]] = [{}, {}]  # stdout, stderr: rank -> last command marked
        self._marked = threading.Condition()
        self.job: slurm.Allocation | None = None
        self.step: str | None = None  # "job.step", once the ranks have said it

    def start(self, preset: Sequence[Command] = ()) -> None:
        """Start the step; ``preset`` commands wait in the channel for the ranks to connect."""
        opts = self.options
        job = slurm.allocation()
        if opts.nnodes > len(job.nodes):
            raise slurm.SlurmError(f"--nodes {opts.nnodes}: job {job.job_id} has {len(job.nodes)} nodes")
        nodes = job.nodes[: opts.nnodes]
        self.job = slurm.Allocation(job.job_id, nodes)
        n = opts.nproc
        self.log_dir = tempfile.mkdtemp(prefix="jupyter_gpu_ddp_")
        self.world_size = len(nodes) * n
        self.ranks = list(range(self.world_size))
        self.hosts = {rank: nodes[rank // n] for rank in self.ranks}
        master = slurm.node_address(nodes[0])
        self.channel = KernelEnd(self.log_dir, self.key, self.world_size, host=slurm.address_towards(master))
        for cmd in preset:
            self.send(cmd)
        logs = {
            r: (os.path.join(self.log_dir, f"{r}.out"), os.path.join(self.log_dir, f"{r}.err"))
            for r in self.ranks
        }
        self._stderr = {r: err for r, (_, err) in logs.items()}
        try:
            self._srun = subprocess.Popen(
                slurm.srun_argv(job.job_id, len(nodes), n),
                env=self._srun_env(master),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a Jupyter interrupt is the kernel's to handle, not srun's
                preexec_fn=dies_with_parent(signal.SIGTERM),
            )
        except OSError as exc:
            raise slurm.SlurmError(f"--slurm: cannot run srun: {exc}") from None
        for index, pipe in enumerate((self._srun.stdout, self._srun.stderr)):
            assert pipe is not None
            reader = threading.Thread(
                target=self._split,
                args=(pipe, {r: paths[index] for r, paths in logs.items()}, self._marks[index]),
                daemon=True,
            )
            reader.start()
            self._readers.append(reader)
        self.pump = LogPump(logs, self.hosts)
        self.pump.start()

    def _srun_env(self, master: str) -> dict[str, str]:
        """The kernel's environment (srun exports it to every task) and what the ranks need."""
        opts = self.options
        root = str(Path(__file__).resolve().parents[2])  # where the ranks import this package from
        env = dict(os.environ)
        env.update(
            {
                "MASTER_ADDR": master,
                "MASTER_PORT": str(MASTER_PORTS[0] + secrets.randbelow(MASTER_PORTS[1] - MASTER_PORTS[0])),
                "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
                CONFIG_ENV: encode(self._args(self)[0]),
            }
        )
        if "OMP_NUM_THREADS" not in os.environ and opts.nproc > 1:
            env["OMP_NUM_THREADS"] = "1"  # what torchrun does
        if opts.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif opts.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in opts.gpus)
        return env

    def _split(self, pipe: IO[bytes], paths: dict[int, str], marks: dict[int, int]) -> None:
        """Copy each labelled line to its rank's file, up to a reply's mark (noted in ``marks``);
        srun's own lines are kept for errors."""
        files: dict[int, IO[str]] = {}
        try:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", "replace")
                found = _LABEL.match(line)
                rank = int(found[1]) if found else -1
                if found is None or rank not in paths:
                    self._said.append(line)
                    continue
                text = line[found.end() :]
                text, _, replied = text.partition(REPLIED_MARK)  # after a print(..., end="") too
                if text.startswith(
                    "slurmstepd"
                ):  # the step's own news (cancelled, time limit) comes labelled
                    self._said.append(text)
                if rank not in files:
                    files[rank] = open(paths[rank], "a", encoding="utf-8")  # noqa: SIM115 - closed below
                files[rank].write(text)
                files[rank].flush()
                if seq := _MARK_SEQ.fullmatch(replied.strip()):  # a rank's code may print anything after it
                    with self._marked:
                        marks[rank] = int(seq[0])
                        self._marked.notify_all()
        finally:
            pipe.close()
            for handle in files.values():
                handle.close()
            with self._marked:
                self._marked.notify_all()

    def collect(
        self,
        seq: int,
        deadline: float | None = None,
        stop_on_error: bool = True,
        got: Collected | None = None,
    ) -> Collected:
        """``Gang.collect``; the step's id is taken from the first replies that carry it."""
        got = super().collect(seq, deadline, stop_on_error, got)
        self._await_output(seq, list(got.replies))
        if self.step is None and self.job is not None:  # a rank's word: only a step of this job
            said = (r.info.get("slurm_step") for r in got.replies.values())
            ours = re.compile(rf"{re.escape(self.job.job_id)}\.\d{{1,9}}")
            self.step = next((s for s in said if isinstance(s, str) and ours.fullmatch(s)), None)
        return got

    def _await_output(self, seq: int, ranks: list[int]) -> None:
        """Until the output these ranks wrote before replying to ``seq`` is in their files."""

        def written() -> bool:
            readers_done = not any(reader.is_alive() for reader in self._readers)
            return readers_done or all(m.get(r, -1) >= seq for m in self._marks for r in ranks)

        with self._marked:
            self._marked.wait_for(written, OUTPUT_WAIT_S)

    def placement(self) -> str:
        """The job, the nodes the ranks run on, and the step's state as Slurm tells it now."""
        assert self.job is not None
        step = f"step {self.step} {slurm.step_state(self.step)}" if self.step else "step starting"
        return f"Slurm job {self.job.job_id}, nodes {','.join(self.job.nodes)}, {step}"

    # ------------------------------------------------------------ processes
    def interrupt(self, ranks: list[int]) -> None:
        """SIGINT to every task of the step: the ranks running a cell stop it, idle ones ignore it."""
        if self.step is not None and not self.closed:
            with contextlib.suppress(slurm.SlurmError):  # the step just ended: nothing to stop
                slurm.signal_step(self.step, "INT")

    def poll_death(self) -> Death | None:
        """The rank srun reports as ended badly, once srun has exited; a step that ended for
        another reason (refused, a node lost, the time limit) raises DDPError in Slurm's words."""
        if self.closed or self._srun is None:
            return self._death
        code = self._srun.poll()
        if code is None:
            return None
        self._join_readers()
        said = list(self._said)
        why = slurm.step_failure(said)
        if why is not None:
            raise DDPError(why, [why + "\n"])
        self.closed = True
        if code == 0:
            self.exited_cleanly = True
            return None
        ends = slurm.task_ends(said)
        if not ends:
            last = next((line.strip() for line in reversed(said) if line.strip()), "")
            msg = f"srun exited with code {code}" + (f": {last}" if last else "")
            raise DDPError(msg, [msg + "\n"])
        first = ends[0]
        self._death = Death(
            first.rank,
            0,
            first.exitcode,
            first.signal_name,
            "",
            tail(self._stderr.get(first.rank, "")),
            node=first.node,
        )
        return self._death

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(timeout=5.0)  # srun has exited: its pipes are at their end

    def pids(self) -> dict[int, int]:
        """The ranks' pids are their nodes': none of them is this machine's to signal."""
        return {}

    def stop(self, clean: bool, timeout: float = 5.0, wait: bool = True) -> None:
        """End the step: ask the ranks to stop (``clean``) and wait, else SIGTERM to srun,
        which cancels the step; ``wait=False`` leaves waiting for srun to a thread."""
        if self._stopped:
            return
        self._stopped = True
        srun = self._srun
        if srun is not None and srun.poll() is None:
            if clean and self.channel is not None and not self.closed:
                self.send(Command("stop"))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    srun.wait(timeout)
            if srun.poll() is None:
                srun.terminate()
        self.closed = True
        if srun is not None and srun.poll() is not None:
            self._join_readers()
        self._end(wait)

    def _finish_stop(self) -> None:
        if self._srun is not None:
            try:
                self._srun.wait(SRUN_STOP_S)
            except subprocess.TimeoutExpired:
                self._srun.kill()
                self._srun.wait()
            self._join_readers()
        super()._finish_stop()
