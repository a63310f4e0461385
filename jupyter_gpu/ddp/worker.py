"""Entry point of every rank: set up torch.distributed, then run what the kernel sends.

Module-level so that spawn and the forkserver pickle it by reference (notebook functions
cannot be, which is why cells travel as text); torch is imported only inside, so the kernel
can name this function without importing torch.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import linecache
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from ..analysis.cells import device_change
from ..torch_state import allocator_readings, nvml_uuid
from .channel import RankEnd
from .errors import capture, cell_filename
from .lifeline import bind_to_kernel, detach_from_terminal_signals
from .protocol import Command, Reply, WorkerConfig


def main(config: WorkerConfig) -> None:
    """Run one rank until the kernel says stop (or dies)."""
    detach_from_terminal_signals()
    if not config.options.slurm:  # under srun the kernel is on another host: the step ends us
        bind_to_kernel(config.kernel_pid)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # files behind them: flush per line, live output
            stream.reconfigure(line_buffering=True)
    sys.path[:] = config.sys_path  # the kernel's, now (the forkserver has the one from its start)
    os.chdir(config.cwd)
    _Rank(config).serve()


def to_cpu(value: Any) -> Any:
    """Tensors (also inside dicts, lists and tuples) moved to CPU, so the kernel needs no GPU."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if type(value) is dict:
        return {k: to_cpu(v) for k, v in value.items()}
    if type(value) is list:
        return [to_cpu(v) for v in value]
    if isinstance(value, tuple):
        items = [to_cpu(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


class _Rank:
    """One rank's side of the channel, with the namespace that persists across cells."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        # The kernel serves every rank of a --slurm launch on one channel: they say their rank.
        which = self.rank if config.options.slurm else self.local_rank
        self.channel = RankEnd(config.channel, config.key, which, config.pin)
        self.ns: dict[str, Any] = {}
        self.device: Any = None
        self.executing = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        """The kernel interrupts a running cell with SIGINT; between cells it means nothing."""
        if self.executing:
            raise KeyboardInterrupt

    def serve(self) -> None:
        import torch.distributed as dist

        try:
            self._reply(0, self._guard(self._init))
            while True:
                try:
                    seq, cmd = self.channel.next()
                except EOFError:  # the kernel has gone (its lifeline ends us too)
                    return
                if cmd.kind == "stop":
                    return
                self._reply(seq, self._guard(functools.partial(self._handle, cmd)))
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    def _reply(self, seq: int, reply: Reply) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        if self.config.options.slurm:
            from .slurm_rank import mark_replied

            mark_replied(seq)
        reply.sent = time.monotonic()
        self.channel.reply(seq, reply)

    def _guard(self, step: Callable[[], Reply]) -> Reply:
        """Any exception of a step becomes an error reply: the rank itself stays up."""
        try:
            return step()
        except BaseException as exc:  # a cell may raise SystemExit or be interrupted
            return Reply(
                self.rank, ok=False, error=capture(exc), interrupted=isinstance(exc, KeyboardInterrupt)
            )

    def _init(self) -> Reply:
        import torch
        import torch.distributed as dist

        if self.config.options.device != "cpu" and torch.cuda.is_available():
            visible = torch.cuda.device_count()
            if self.local_rank >= visible:
                raise RuntimeError(
                    f"rank {self.rank} needs GPU {self.local_rank} but this node shows {visible} "
                    f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); "
                    "use fewer ranks (-n), list GPUs with --gpus, or run the ranks on the CPU "
                    "with --backend gloo"
                )
            self.device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            # Hugging Face's Trainer (through accelerate) joins a process group on the CPU only
            # when told it runs there; else every rank trained alone, each with all the data.
            os.environ.setdefault("ACCELERATE_USE_CPU", "true")
        backend = self.config.options.backend
        if backend == "auto":
            backend = "nccl" if self.device.type == "cuda" else "gloo"
        if backend == "nccl" and self.device.type != "cuda":
            raise RuntimeError("--backend nccl needs a GPU for every rank and this rank sees none")
        if "OMP_NUM_THREADS" in os.environ:  # the forkserver's OpenMP read it before we set it
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        device_id = self.device if backend == "nccl" else None
        if self.config.store is None:  # across nodes: the rendezvous store, through env://
            dist.init_process_group(backend, device_id=device_id)
        else:  # one node: a FileStore in the session's 0700 directory, no port for others
            store = dist.FileStore(self.config.store, self.world_size)
            dist.init_process_group(
                backend, store=store, rank=self.rank, world_size=self.world_size, device_id=device_id
            )
        self.ns = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "torch": torch,
            "dist": dist,
            "RANK": self.rank,
            "LOCAL_RANK": self.local_rank,
            "WORLD_SIZE": self.world_size,
            "device": self.device,
        }
        if self.config.options.fsdp:
            from . import fsdp

            mesh = fsdp.make_mesh(self.device, backend)
            self.ns.update(mesh=mesh, shard=functools.partial(fsdp.shard, mesh=mesh))
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "backend": backend,
            "device": str(self.device),
            "torch": torch.__version__,
        }
        if self.config.options.slurm:  # the kernel signals the step by its id (an interrupt)
            info["slurm_step"] = f"{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
        return Reply(self.rank, ok=True, info=info)

    def _handle(self, cmd: Command) -> Reply:
        self._load(cmd.objects)
        if cmd.kind == "push":
            return Reply(self.rank, ok=True)
        if cmd.kind == "pull":
            missing = [n for n in cmd.names if n not in self.ns]
            if missing:
                raise NameError(f"name {missing[0]!r} is not defined on rank {self.rank}")
            return Reply(self.rank, ok=True, value=self._dump({n: self.ns[n] for n in cmd.names}))
        if cmd.kind in ("save", "load"):
            return self._checkpoint(cmd)
        info: dict[str, Any] = {"cell_gpus": self._run_cell(cmd)}
        if self.config.options.fsdp:
            from .fsdp import held

            info["held"] = held(self.ns)
        if cmd.return_name is None:
            return Reply(self.rank, ok=True, info=info)
        return Reply(self.rank, ok=True, value=self._dump(self.ns.get(cmd.return_name)), info=info)

    def _checkpoint(self, cmd: Command) -> Reply:
        """``%ddp_save`` / ``%ddp_load`` on this rank; a reason it cannot is a reply, not a crash."""
        from . import checkpoint

        model, optimizer = cmd.names
        try:
            if cmd.kind == "save":
                done = checkpoint.save(self.ns, model, optimizer, cmd.path, cmd.replaces)
            else:
                done = checkpoint.load(self.ns, model, optimizer, cmd.path)
        except checkpoint.Problem as exc:
            return Reply(self.rank, ok=True, info={"problem": str(exc), "secondary": exc.secondary})
        except Exception as exc:  # DCP's own errors (a full disk, a read error): one line each
            return Reply(self.rank, ok=True, info={"problem": checkpoint.one_line(exc)})
        return Reply(self.rank, ok=True, info={"checkpoint": done})

    def _load(self, objects: dict[str, bytes]) -> None:
        import cloudpickle

        for name, blob in objects.items():
            try:
                self.ns[name] = cloudpickle.loads(blob)
            except Exception as exc:
                raise RuntimeError(f"could not load {name!r} on rank {self.rank}: {exc}") from exc

    def _dump(self, value: Any) -> bytes:
        import cloudpickle

        try:
            return cloudpickle.dumps(to_cpu(value))
        except Exception as exc:
            raise RuntimeError(f"rank {self.rank} could not send its value back: {exc}") from exc

    def _run_cell(self, cmd: Command) -> list[dict[str, Any]]:
        """Run the cell; what this rank's allocator did in it, for the kernel's cell timeline."""
        import torch

        filename = cell_filename(self.rank)
        text = "\n" * cmd.line_offset + cmd.source
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        code = compile(text, filename, "exec", dont_inherit=True)
        amp: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if self.config.options.amp:
            dtype = torch.bfloat16 if self.config.options.amp == "bf16" else torch.float16
            # cache_enabled=False: a cell is often a whole training loop (see kernel/amp.py)
            amp = torch.autocast(self.device.type, dtype=dtype, cache_enabled=False)
        on_gpu = self.device.type == "cuda"
        before = allocator_readings(torch, nvml_uuid) if on_gpu else {}
        try:
            with amp:
                self.executing = True
                exec(code, self.ns)
        finally:
            self.executing = False
        after = allocator_readings(torch, nvml_uuid) if on_gpu else {}
        return [device_change(before.get(i), after[i]) for i in sorted(after)]
