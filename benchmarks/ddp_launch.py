"""Benchmark %%ddp_launch and persistent %%ddp ranks against the other ways to start DDP.

    python benchmarks/ddp_launch.py [--nproc 2] [--cells 50] [--device auto|cpu|cuda] [--think S]

Runs everything in one process, in this order, and prints one table:

1. accelerate's notebook_launcher, if installed and the ranks get GPUs: it forks, so it must run
   before this process touches CUDA (it refuses afterwards: that is the problem being fixed).
2. CUDA is initialised here (on GPUs), as a notebook that ran `%gpu_warmup` would have done.
3. Start-up: time from the start of the call until every rank has finished one all-reduce, for
   %%ddp_launch (first launch: cold forkserver; then warm), torch.multiprocessing.spawn and
   torchrun (a subprocess, as `!torchrun` from a notebook).
4. Per-cell overhead of persistent ranks: a trivial %%ddp cell, median and 90th percentile.
5. Time from a rank's exception until the error reaches the caller (%%ddp_launch, %%ddp,
   torchrun), with the other rank waiting in a barrier.
6. Training throughput of a small MLP under DDP through %%ddp_launch and under torchrun.

The magics run through an in-process IPython shell (no Jupyter needed); on CPU the ranks use gloo.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

ALL_REDUCE_CELL = """\
x = torch.ones(1, device=device)
dist.all_reduce(x)
if device.type == "cuda":
    torch.cuda.synchronize()
import time
_result = time.time()
"""

FAILING_CELL = """\
import time
if RANK == WORLD_SIZE - 1:  # the last rank (rank 1 of 2; rank 0 alone on one GPU)
    open({path!r}, "w").write(repr(time.time()))
    raise RuntimeError("the last rank fails")
dist.barrier()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _device() -> Any:
    import torch

    rank = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


def throughput(device: Any, width: int, batch: int, steps: int, warmup: int = 10) -> float:
    """Samples per second of one rank training an MLP under DDP (process group already up)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    model = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.ReLU(), torch.nn.Linear(4 * width, width)
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(batch, width, device=device)
    for step in range(warmup + steps):
        if step == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
        loss = ddp(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - started)


def spawn_rank(rank: int, nproc: int, port: int, backend: str, out: Any) -> None:
    """torch.multiprocessing.spawn target: init, one all-reduce, report the time it finished."""
    import torch
    import torch.distributed as dist

    os.environ["LOCAL_RANK"] = str(rank)
    device = _device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nproc)
    x = torch.ones(1, device=device)
    dist.all_reduce(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    out.put(time.time())
    dist.destroy_process_group()


def accelerate_rank(backend: str, out: Any) -> None:
    """notebook_launcher target (accelerate sets RANK/WORLD_SIZE/MASTER_* for it)."""
    import torch
    import torch.distributed as dist

    device = _device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    x = torch.ones(1, device=device)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    out.put(time.time())
    dist.destroy_process_group()


TORCHRUN_SCRIPT = """\
import json, os, sys, time
sys.path.insert(0, {bench_dir!r})
import torch, torch.distributed as dist
from {module} import _device, throughput
device = _device()
if device.type == "cuda":
    torch.cuda.set_device(device)
dist.init_process_group({backend!r})
x = torch.ones(1, device=device)
dist.all_reduce(x)
if device.type == "cuda":
    torch.cuda.synchronize()
done = time.time()
mode = sys.argv[1]
if mode == "fail":
    if dist.get_rank() == dist.get_world_size() - 1:
        open(sys.argv[2], "w").write(repr(time.time()))
        raise RuntimeError("the last rank fails")
    dist.barrier()
rate = throughput(device, {width}, {batch}, {steps}) if mode == "train" else 0.0
print(json.dumps({{"rank": dist.get_rank(), "done": done, "rate": rate}}), flush=True)
dist.destroy_process_group()
"""


class Bench:
    def __init__(self, args: argparse.Namespace, me: Any) -> None:
        import torch

        self.args = args
        self.me = me  # this file imported as a module: spawn can pickle its functions by name
        self.cuda = args.device == "cuda" or (
            args.device == "auto" and torch.cuda.device_count() >= args.nproc
        )
        self.backend = "nccl" if self.cuda else "gloo"
        self.width, self.batch, self.steps = (2048, 256, 200) if self.cuda else (256, 64, 100)
        self.rows: list[tuple[str, str, str]] = []
        self.shell: Any = None

    def row(self, what: str, value: str, note: str = "") -> None:
        self.rows.append((what, value, note))
        print(f"  {what}: {value} {note}", file=sys.stderr, flush=True)

    # -------------------------------------------------------------- helpers
    def load(self) -> None:
        """What %load_ext does for the ddp magics (with >= 2 GPUs, or one once torch is imported,
        as it is here: start the forkserver in the background)."""
        from IPython.core.interactiveshell import InteractiveShell

        from jupyter_gpu.kernel.ddp.magics import register
        from jupyter_gpu.nvml.visible import visible_gpus

        self.shell = InteractiveShell.instance()
        register(self.shell)
        self.loaded_at = time.time()
        self.prestarted = visible_gpus() >= 2 or (visible_gpus() == 1 and "torch" in sys.modules)

    def magic(self, name: str, line: str, cell: str | None = None) -> Any:
        if cell is None:
            return self.shell.run_line_magic(name, line)
        return self.shell.run_cell_magic(name, line, cell)

    def torchrun(self, mode: str, *extra: str) -> tuple[float, list[dict[str, Any]], int]:
        script = Path(self.tmp) / "bench_torchrun.py"
        script.write_text(
            TORCHRUN_SCRIPT.format(
                bench_dir=str(Path(__file__).parent),
                module=self.me.__name__,
                backend=self.backend,
                width=self.width,
                batch=self.batch,
                steps=self.steps,
            )
        )
        started = time.time()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={self.args.nproc}",
                str(script),
                mode,
                *extra,
            ],
            capture_output=True,
            text=True,
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return started, lines, proc.returncode

    # ------------------------------------------------------------- sections
    def accelerate(self) -> None:
        try:
            from accelerate import notebook_launcher
        except ImportError:
            self.row("accelerate notebook_launcher", "-", "(accelerate not installed)")
            return
        if not self.cuda:
            self.row("accelerate notebook_launcher", "-", "(its multi-process path needs GPUs)")
            return
        import multiprocessing

        out = multiprocessing.get_context("fork").SimpleQueue()
        started = time.time()
        try:
            notebook_launcher(
                self.me.accelerate_rank,
                (self.backend, out),
                num_processes=self.args.nproc,
                use_port=str(_free_port()),
            )
        except Exception as exc:  # a comparison, not the subject: report and go on
            self.row(
                "start-up: accelerate notebook_launcher (fork)", "failed", f"({type(exc).__name__}: {exc})"
            )
            return
        done = max(out.get() for _ in range(self.args.nproc))
        self.row(
            "start-up: accelerate notebook_launcher (fork)",
            f"{done - started:.2f} s",
            "(run before CUDA init in the parent: it refuses after)",
        )

    def startup(self) -> None:
        import torch.multiprocessing as mp

        n = self.args.nproc
        first = (
            f"first launch, {time.time() - self.loaded_at:.1f} s after loading started the forkserver"
            if self.prestarted
            else "first launch: cold forkserver imports torch"
        )
        for label in (first, "warm forkserver", "warm forkserver"):
            started = time.time()
            self.magic("ddp_launch", f"-n {n} --output none", ALL_REDUCE_CELL)
            done = max(self.shell.user_ns["_ddp"].values())
            self.row(
                f"start-up: %%ddp_launch ({label})",
                f"{done - started:.2f} s",
                f"(cell returned after {time.time() - started:.2f} s)",
            )
        out = mp.get_context("spawn").SimpleQueue()
        started = time.time()
        try:
            mp.spawn(self.me.spawn_rank, args=(n, _free_port(), self.backend, out), nprocs=n)
        except Exception as exc:  # a comparison, not the subject: report and go on
            self.row("start-up: torch.multiprocessing.spawn", "failed", f"({type(exc).__name__})")
        else:
            done = max(out.get() for _ in range(n))
            self.row("start-up: torch.multiprocessing.spawn", f"{done - started:.2f} s")
        started, lines, code = self.torchrun("allreduce")
        if code == 0:
            done = max(line["done"] for line in lines)
            self.row("start-up: torchrun --standalone", f"{done - started:.2f} s")
        else:
            self.row("start-up: torchrun --standalone", "failed", f"(exit code {code})")

    def per_cell(self) -> None:
        from ddp_cells import cell_times, summary  # across Slurm nodes too: benchmarks/ddp_cells.py

        self.magic("ddp_start", f"-n {self.args.nproc}")
        try:
            self.magic("ddp", "", "x = 0")
            times = cell_times(self.magic, "x += 1", self.args.cells)
            self.row("per-cell overhead: %%ddp (trivial cell)", summary(times), f"({len(times)} cells)")
            self.failure("%%ddp", "ddp", "")
        finally:
            self.magic("ddp_stop", "")

    def failure(self, label: str, magic: str, line: str) -> None:
        from jupyter_gpu.ddp.errors import DDPError

        path = Path(self.tmp) / "raised_at"
        path.unlink(missing_ok=True)
        try:
            self.magic(magic, line, FAILING_CELL.format(path=str(path)))
        except DDPError:
            shown = time.time()
        else:
            raise RuntimeError("the failing cell did not fail")
        self.row(f"rank exception -> error shown: {label}", f"{shown - float(path.read_text()):.2f} s")

    def failures(self) -> None:
        self.failure("%%ddp_launch", "ddp_launch", f"-n {self.args.nproc} --output none")
        path = Path(self.tmp) / "raised_at_torchrun"
        _, _, code = self.torchrun("fail", str(path))
        shown = time.time()
        if code != 0 and path.exists():
            self.row(
                "rank exception -> error shown: torchrun --standalone",
                f"{shown - float(path.read_text()):.2f} s",
            )

    def training(self, rounds: int = 3) -> None:
        """Alternate the two launchers and keep each one's best round (shared machines are noisy)."""
        n = self.args.nproc
        self.shell.user_ns["throughput"] = self.me.throughput
        ours, theirs = 0.0, 0.0
        for _ in range(rounds):
            self.magic(
                "ddp_launch",
                f"-n {n} --output none --push throughput",
                f"_result = throughput(device, {self.width}, {self.batch}, {self.steps})",
            )
            ours = max(ours, sum(self.shell.user_ns["_ddp"].values()))
            _, lines, code = self.torchrun("train")
            if code == 0:
                theirs = max(theirs, sum(line["rate"] for line in lines))
        what = f"MLP {self.width}x{4 * self.width}, batch {self.batch}/rank, best of {rounds}"
        self.row(f"throughput: %%ddp_launch ({what})", f"{ours:,.0f} samples/s")
        if theirs:
            self.row(
                f"throughput: torchrun ({what})",
                f"{theirs:,.0f} samples/s",
                f"(%%ddp_launch at {100 * ours / theirs:.1f} % of torchrun)",
            )
        else:
            self.row(f"throughput: torchrun ({what})", "failed")

    def run(self) -> None:
        import torch

        with tempfile.TemporaryDirectory() as self.tmp:
            self.accelerate()
            self.load()
            if self.cuda:
                torch.zeros(1, device="cuda")  # the kernel has used CUDA from here on
            time.sleep(self.args.think)  # the notebook's cells between importing torch and launching
            self.startup()
            self.per_cell()
            self.failures()
            self.training()
        where = f"{self.args.nproc} ranks, {self.backend}, " + (
            torch.cuda.get_device_name(0) if self.cuda else f"CPU ({os.cpu_count()} cores)"
        )
        print(f"\n{where}, torch {torch.__version__}, CUDA initialised in the parent: {self.cuda}\n")
        width = max(len(r[0]) for r in self.rows)
        print(f"| {'what'.ljust(width)} | value | note |")
        print(f"|{'-' * (width + 2)}|---|---|")
        for what, value, note in self.rows:
            print(f"| {what.ljust(width)} | {value} | {note} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    think = "seconds between loading (torch imported, CUDA used) and the first launch (default 0: at once)"
    parser.add_argument("--think", type=float, default=0.0, help=think)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    me = importlib.import_module(Path(__file__).stem)
    Bench(args, me).run()


if __name__ == "__main__":
    main()
