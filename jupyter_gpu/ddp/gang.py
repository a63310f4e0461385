"""The ranks of one launch or session on this node: rendezvous, processes, commands, teardown.

Built on torch.distributed's public layers, not ``elastic_launch`` / ``LocalElasticAgent``, whose
``run()`` blocks until the workers exit (no persistent workers), polls and tears down on its own
schedule (14 s until a failure reached the caller) and installs signal handlers. Here commands
and replies go over a private channel (``channel.py``: a Unix socket in the session's 0700
directory), never a store another user can reach. On one node the process group starts from a
``FileStore`` in that directory (nothing listens on a port; gloo and NCCL use the loopback), and
scripts and the preflight (torchrun's ``env://``) get a loopback ``TCPStore`` (``store_host.py``);
across nodes ``rendezvous`` does torch's c10d (or static) rendezvous at the user's endpoint, and
the only message of ours that crosses it is a signed abort (``abort.py``).
``multiprocessing.start_processes`` starts the ranks (forkserver or spawn, never a fork of the
kernel) with per-rank output files and error files; this module wakes on each reply and looks at
the processes every 50 ms, so a failure is seen once reported, and tears down on a short timeout.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from . import rendezvous
from .abort import ABORT_KEY, SECRET_ENV, abort_is_genuine, shared_secret, sign_abort
from .channel import KernelEnd, new_key
from .forkserver import use_forkserver
from .options import WorkerOptions
from .outcome import Collected, Death
from .output import LogPump, tail
from .protocol import Command, Reply
from .store_host import StoreHost
from .torch_env import kept_signal_handlers, loopback_interface, quiet_torch_logs

SHUTDOWN_TIMEOUT = 2.0  # SIGTERM -> SIGKILL; keeps 'others down within 5 s'
POLL_S = 0.05  # how long the kernel waits on the channel before it looks at the processes again
LOST_GRACE_S = 2.0  # a rank whose channel closed has this long to be seen dead, else it is silent
FAILURE_GRACE_S = 0.15  # after a rank reported a failure: its peers are watched for a death behind it


class Gang:
    """The local ranks of one rendezvous run."""

    def __init__(
        self,
        options: WorkerOptions,
        entrypoint: Callable[..., Any] | str,
        args: Callable[[Gang], tuple[Any, ...]],
        env: dict[str, str] | None = None,
        commands: bool = True,
    ) -> None:
        """``args(gang)`` gives the entry point's arguments (the same for every rank), once the
        session's directory, channel and store exist; ``env`` is added to every rank's
        environment. ``commands``: the ranks serve the channel (``worker.main``); else they run
        on their own under torchrun's ``env://`` contract (scripts, the preflight)."""
        self.options = options
        self._extra_env = env or {}
        self.commands = commands
        self.secret: bytes | None = None  # multi-node: signs the abort
        if not self.single_node:
            self.secret = shared_secret()
            if self.secret is None:
                raise ValueError(f"a multi-node launch needs {SECRET_ENV} (the docs' security page says why)")
        self.key = new_key()  # the channel's; travels to the ranks through the launcher only
        self.channel: KernelEnd | None = None
        self.store_path: str | None = None  # one node, commands: the process group's FileStore
        self._tcp: Any = None  # multi-node: the rendezvous store (the abort key)
        self._started = time.time()
        self._host: StoreHost | None = None  # one node, env://: the store's process
        self._entrypoint = entrypoint
        self._args = args
        self.ranks: list[int] = []
        self.hosts: dict[int, str] = {}  # rank -> node, where ranks span several (--slurm)
        self.world_size = 0
        self.log_dir = ""  # the session's directory (0700): logs, channel socket, FileStore
        self.pump: LogPump | None = None
        self._handler: Any = None
        self._pcontext: Any = None
        self._next_seq = 1
        self._stderr: dict[int, str] = {}
        self.closed = False  # the processes are gone (or being torn down)
        self._death: Death | None = None  # the rank whose failure ended them, once seen
        self.exited_cleanly = False
        self.return_values: dict[int, Any] = {}  # global rank -> what a function entry point returned
        self.keep_logs = False  # set when an error message points at them
        self._stopped = False

    @property
    def single_node(self) -> bool:
        """No rendezvous endpoint: everything stays on this machine."""
        return self.options.rdzv_endpoint is None

    # ----------------------------------------------------------------- start
    def start(self, preset: Sequence[Command] = ()) -> None:
        """Rendezvous, then start the ranks; ``preset`` commands are queued before they run."""
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes

        opts = self.options
        n = opts.nproc
        self.log_dir = tempfile.mkdtemp(prefix="jupyter_gpu_ddp_")
        if self.single_node:
            node_rank, nodes = 0, 1
            lo = loopback_interface()
            # A run id, as torchrun sets: Lightning then takes RANK and WORLD_SIZE from the ranks
            # (TorchElasticEnvironment) and says in one line when its `devices` do not match.
            store_env = {
                "GLOO_SOCKET_IFNAME": lo,
                "NCCL_SOCKET_IFNAME": lo,
                "TORCHELASTIC_RUN_ID": uuid.uuid4().hex,
            }
            if self.commands:
                self.store_path = os.path.join(self.log_dir, "store")
            else:
                self._host = StoreHost()
                store_env |= {
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(self._host.port),
                    "TORCHELASTIC_USE_AGENT_STORE": "True",
                }
        else:
            self._handler, self._tcp, node_rank, nodes, store_env = rendezvous.join(self.options)
        self.ranks = [node_rank * n + i for i in range(n)]
        self.world_size = nodes * n
        if self.commands:
            self.channel = KernelEnd(self.log_dir, self.key, n)
        for cmd in preset:
            self.send(cmd)

        group = {"GROUP_RANK": str(node_rank), "GROUP_WORLD_SIZE": str(nodes), **store_env}
        envs = {i: self._env(i, group) for i in range(n)}
        if opts.start_method == "forkserver" and not isinstance(self._entrypoint, str):
            use_forkserver()
        with quiet_torch_logs(), kept_signal_handlers():
            self._pcontext = start_processes(
                name="ddp",
                entrypoint=self._entrypoint,
                args={i: self._args(self) for i in range(n)},
                envs=envs,
                logs_specs=DefaultLogsSpecs(log_dir=self.log_dir, redirects=Std.ALL, tee=Std.NONE),
                start_method=opts.start_method,
            )
        self._stderr = {self.ranks[i]: self._pcontext.stderrs[i] for i in range(n)}
        self.pump = LogPump(
            {self.ranks[i]: (self._pcontext.stdouts[i], self._pcontext.stderrs[i]) for i in range(n)}
        )
        self.pump.start()

    def _env(self, local_rank: int, group: dict[str, str]) -> dict[str, str]:
        opts = self.options
        env = dict(os.environ)  # %env changes must reach ranks started by an older forkserver
        env.update(
            {
                "RANK": str(self.ranks[local_rank]),
                "LOCAL_RANK": str(local_rank),
                "ROLE_RANK": str(self.ranks[local_rank]),
                "ROLE_NAME": "default",
                "LOCAL_WORLD_SIZE": str(opts.nproc),
                "WORLD_SIZE": str(self.world_size),
                "ROLE_WORLD_SIZE": str(self.world_size),
                "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0",
                **group,
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
                "JUPYTER_GPU_KERNEL_PID": str(os.getpid()),
                **self._extra_env,
            }
        )
        if "OMP_NUM_THREADS" not in os.environ and opts.nproc > 1:
            env["OMP_NUM_THREADS"] = "1"  # what torchrun does, so throughput matches it
        if opts.device == "cpu":  # hidden, so that torch and the user's code agree: no GPU here
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif opts.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in opts.gpus)
        return env

    # -------------------------------------------------------------- commands
    def send(self, cmd: Command) -> int:
        """Queue ``cmd`` for every rank; returns its sequence number."""
        assert self.channel is not None
        seq = self._next_seq
        self._next_seq += 1
        self.channel.send(seq, cmd)
        return seq

    def collect(
        self,
        seq: int,
        deadline: float | None = None,
        stop_on_error: bool = True,
        got: Collected | None = None,
    ) -> Collected:
        """Wait for the replies to ``seq`` while watching the processes. Fills ``got`` in place,
        so a caller that catches KeyboardInterrupt keeps what arrived."""
        assert self.channel is not None
        got = got if got is not None else Collected()
        local = {rank: i for i, rank in enumerate(self.ranks)}
        while len(got.replies) < len(self.ranks):
            pending = [local[r] for r in self.ranks if r not in got.replies]
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            for i, reply in sorted(
                self.channel.receive(seq, pending, wait), key=lambda x: getattr(x[1], "sent", 0.0)
            ):
                if isinstance(reply, Reply) and reply.rank == self.ranks[i]:
                    got.replies[reply.rank] = reply
            lost = [r for r in self.ranks if r not in got.replies and local[r] in self.channel.lost]
            if lost:  # a rank closed its end: it died (its peers' errors follow from that), or
                # its channel was cut; either way it will not answer
                got.death = self.death_soon(LOST_GRACE_S)
                got.lost = [] if got.death is not None else lost
                break
            if stop_on_error and got.failures():
                got.death = self._death_behind(seq, got)
                break
            if len(got.replies) == len(self.ranks):
                break
            got.death = self.poll_death()
            if self.closed:
                got.replies.update(self._late_replies(seq, got))  # it may have reported just before dying
                break
            if self._aborted():
                got.aborted = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                got.expired = True
                break
        return got

    def _death_behind(self, seq: int, got: Collected) -> Death | None:
        """After a rank failed: a peer that died meanwhile, which is then the cause (its death
        broke the others' collective). A dying rank's channel can close a little after its
        peers already reported the broken collective, so it is watched for a moment."""
        assert self.channel is not None
        deadline = time.monotonic() + FAILURE_GRACE_S
        while time.monotonic() < deadline and not self.closed:
            pending = [i for i, r in enumerate(self.ranks) if r not in got.replies]
            if any(i in self.channel.lost for i in pending):
                return self.death_soon(LOST_GRACE_S)
            death = self.poll_death()
            if death is not None or not pending:
                return death
            for i, reply in self.channel.receive(seq, pending, 0.01):
                if isinstance(reply, Reply) and reply.rank == self.ranks[i]:
                    got.replies[reply.rank] = reply
        return None

    def _late_replies(self, seq: int, got: Collected) -> dict[int, Reply]:
        assert self.channel is not None
        pending = [i for i, r in enumerate(self.ranks) if r not in got.replies]
        return {
            reply.rank: reply
            for i, reply in self.channel.receive(seq, pending, 0.0)
            if isinstance(reply, Reply) and reply.rank == self.ranks[i]
        }

    def _aborted(self) -> bool:
        """Multi-node: another node's kernel signed an abort during this run."""
        if self._tcp is None or self.secret is None or not self._tcp.check([ABORT_KEY]):
            return False
        return abort_is_genuine(self.secret, self._tcp.get(ABORT_KEY), self._started)

    # ------------------------------------------------------------ processes
    def pids(self) -> dict[int, int]:
        """Global rank -> pid of the local ranks."""
        return {self.ranks[i]: pid for i, pid in self._pcontext.pids().items()}

    def poll_death(self) -> Death | None:
        """The rank whose failure ended the processes, or None (running, or all exited with 0).
        Once seen, always: a rank that dies right after one reply explains the next failure."""
        if self.closed:
            return self._death
        with quiet_torch_logs():
            result = self._pcontext.wait(0)
        if result is None:
            return None
        self.closed = True
        if not result.failures:
            self.exited_cleanly = True
            self.return_values = {self.ranks[i]: v for i, v in result.return_values.items()}
            return None
        # The first failure that is not a teardown signal of ours is the cause.
        failures = sorted(
            result.failures.values(), key=lambda f: (f.exitcode == -signal.SIGTERM, f.timestamp)
        )
        first = failures[0]
        if first.exitcode == -signal.SIGTERM and (other := self._not_terminated()) is not None:
            self._death = other  # elastic reported a rank it terminated after the real one died
            return other
        rank = self.ranks[first.local_rank]
        sig = first.signal_name() if first.exitcode < 0 else None
        message = ""  # elastic's error file: written by record() for Python errors only
        if isinstance(first.message, dict):
            message = first.message.get("extraInfo", {}).get("py_callstack", "")
        self._death = Death(
            rank,
            first.pid,
            first.exitcode,
            sig if sig != "<N/A>" else None,
            message,
            tail(self._stderr.get(rank, "")),
        )
        return self._death

    def _not_terminated(self) -> Death | None:
        """A rank that ended by itself (a signal other than SIGTERM, or an exit code)."""
        processes = getattr(getattr(self._pcontext, "_pc", None), "processes", None) or []
        for local, process in enumerate(processes):
            code = process.exitcode
            if code not in (None, 0, -signal.SIGTERM):
                rank = self.ranks[local]
                sig = signal.Signals(-code).name if code < 0 else None
                return Death(rank, process.pid, code, sig, "", tail(self._stderr.get(rank, "")))
        return None

    def wait_for_exit(self, deadline: float | None) -> Death | None:
        """Until every rank exited (None when all with 0), one died, or ``deadline`` passed."""
        while True:
            death = self.poll_death()
            if death is not None or self.exited_cleanly:
                return death
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError
            time.sleep(0.05)

    def death_soon(self, seconds: float = 0.1) -> Death | None:
        """A death seen within ``seconds``: the usual cause when a peer then fails in a collective."""
        deadline = time.monotonic() + seconds
        while True:
            death = self.poll_death()
            if death is not None or self.closed or time.monotonic() >= deadline:
                return death
            time.sleep(0.01)

    def interrupt(self, ranks: list[int]) -> None:
        """SIGINT to the given ranks: a running cell raises KeyboardInterrupt, an idle rank ignores it."""
        for rank, pid in self.pids().items():
            if rank in ranks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)

    def abort_others(self) -> None:
        """Tell other nodes' kernels (multi-node) that this node's ranks are gone."""
        if self._tcp is not None and self.secret is not None:
            with contextlib.suppress(Exception):
                self._tcp.set(ABORT_KEY, sign_abort(self.secret))

    def stop(self, clean: bool, timeout: float = 5.0, wait: bool = True) -> None:
        """End the ranks: ask them to stop (``clean``) and wait, else SIGTERM, then SIGKILL.

        ``wait=False`` sends SIGTERM now and leaves the rest (SIGKILL for stragglers, closing the
        logs and the rendezvous) to a thread, so that an error is shown without waiting for the
        processes to exit: a CUDA process blocked in NCCL can take seconds to go.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._pcontext is not None and clean and not self.closed and self.channel is not None:
            with quiet_torch_logs():
                self.send(Command("stop"))
                self._pcontext.wait(timeout=timeout, period=0.02)
        if self._pcontext is not None and not wait and not self.closed:
            for pid in self._pcontext.pids().values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        self.closed = True
        self._end(wait)

    def _end(self, wait: bool) -> None:
        """Their output drained, the rest of the teardown now or (``wait=False``) on a thread."""
        if self.pump is not None:
            self.pump.drain()
        if wait:
            self._finish_stop()
        else:
            threading.Thread(target=self._finish_stop, name="ddp-teardown", daemon=True).start()

    def _finish_stop(self) -> None:
        if self._pcontext is not None:
            with quiet_torch_logs():
                self._pcontext.close(signal.SIGTERM, timeout=SHUTDOWN_TIMEOUT)
        if self.pump is not None:
            self.pump.stop()
        if self._handler is not None:
            with contextlib.suppress(Exception), quiet_torch_logs():
                self._handler.shutdown()
        # The stores stop listening once nothing holds them; IPython keeps the last traceback
        # (and with it this gang) alive, so let go of them here rather than on collection.
        self._handler = None
        self._tcp = None
        if self.channel is not None:
            self.channel.close()
        if self._host is not None:
            self._host.close()
        if not self.keep_logs and self.log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)
