"""Benchmark the per-cell GPU timeline: what recording each cell costs a notebook that trains.

    python benchmarks/cell_timeline.py [--rounds 7] [--device auto|cpu|cuda]

A real IPython shell runs the cells (as a kernel does, with ``store_history``), in a temp
"runtime dir" so that the timeline and the agent write their files as in a kernel. One shell and
one model throughout; between blocks of cells jupyter_gpu is loaded or unloaded, in rotation
(bare, loaded without the timeline, loaded), so that each block is compared with the bare block
of its own round: drift in machine and GPU speed cancels. Figures: the median over rounds of
each block's wall time against its round's bare block, and the range.

1. a training loop of many very short cells: 5 steps of a small MLP (forward, backward,
   AdamW) each, ~10 ms on an H200: the worst case for a per-cell cost;
2. the same loop in cells of 50 steps;
3. one long cell of 500 steps.

Then the cost of one cell's recording alone (``pre_run_cell`` + ``post_run_cell``: allocator
readings, NVML when due, the record), in microseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

from telemetry import table  # noqa: E402

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(),
    torch.nn.Linear(512, 10),
).to({device!r})
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device={device!r}); y = torch.randint(0, 10, (64,), device={device!r})
def steps(n):
    for _ in range(n):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    if {device!r} == "cuda":
        torch.cuda.synchronize()
steps(50)
"""


def shell(runtime: Path, device: str):
    """A shell whose 'kernel' files go to ``runtime``, with the model of SETUP built."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpu import runtime_dir

    ip = InteractiveShell.instance()
    connection = str(runtime / f"kernel-{uuid.uuid4()}.json")
    runtime_dir.connection_file = lambda: connection  # type: ignore[assignment]
    ip.run_cell(SETUP.format(device=device), store_history=True)
    return ip


SETUPS = ("bare", "loaded, no timeline", "loaded, with timeline")


def load(ip, setup: str) -> list:
    """Register jupyter_gpu's features as ``setup`` says; the functions that take them back."""
    from jupyter_gpu.kernel import extension

    if setup == "bare":
        return []
    features = [
        f for f in extension.FEATURES if setup.endswith("with timeline") or not f.endswith(".timeline")
    ]
    return [__import__(f, fromlist=["register"]).register(ip) for f in features]


def wall(ip, cells: list[str]) -> float:
    started = time.perf_counter()
    for code in cells:
        ip.run_cell(code, store_history=True)
    return time.perf_counter() - started


def overhead(ip, cells: list[str], rounds: int) -> tuple[list[list[str]], float]:
    """The table's rows, and the bare cell's median wall time in seconds."""
    times: dict[str, list[float]] = {s: [] for s in SETUPS}
    for _ in range(rounds):
        for setup in SETUPS:
            undo = load(ip, setup)
            wall(ip, cells[:2])  # the first cells after loading
            times[setup].append(wall(ip, cells))
            for remove in reversed(undo):
                remove()
    rows = []
    for setup in SETUPS:
        ratios = [t / b - 1 for t, b in zip(times[setup], times["bare"])]
        rows.append(
            [
                setup,
                f"{statistics.median(times[setup]):.3f}",
                f"{statistics.median(ratios):+.2%}",
                f"{min(ratios):+.2%} … {max(ratios):+.2%}",
                f"{len(cells)}",
            ]
        )
    return rows, statistics.median(times["bare"]) / len(cells)


def recording_cost(ip, n: int = 2000) -> list[float]:
    from jupyter_gpu.kernel import timeline

    undo = load(ip, "loaded, with timeline")
    tl = timeline.timeline_of(ip)
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        tl.pre_run_cell(None)
        tl.post_run_cell(None)
        samples.append((time.perf_counter() - started) * 1e6)
    for remove in reversed(undo):
        remove()
    samples.sort()
    # the mean carries the NVML reads (at most one a second), which the median leaves out
    return [statistics.median(samples), samples[int(0.99 * (n - 1))], statistics.fmean(samples)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = parser.parse_args()
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        torch.set_num_threads(1)  # threads waiting on each other's barriers drown a 1% effect
    gpu = torch.cuda.get_device_name() if device == "cuda" else "none"
    print(
        f"torch {torch.__version__}, device {device} ({gpu}), {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        ip = shell(Path(tmp), device)
        header = ["setup", "block wall s (median)", "vs bare (median)", "range over rounds", "cells"]
        cell_seconds = {}
        for title, cells in (
            ("1. Many very short cells (5 training steps each)", ["steps(5)"] * 100),
            ("2. Short cells (50 training steps each)", ["steps(50)"] * 20),
            ("3. One long cell (500 steps)", ["steps(500)"]),
        ):
            rows, cell_seconds[title.split(" ", 1)[1]] = overhead(ip, cells, args.rounds)
            table(title, header, rows)
        median, p99, mean = recording_cost(ip)
        table(
            "4. Recording one cell (pre + post), µs",
            ["median", "p99", "mean"],
            [[f"{median:.0f}", f"{p99:.0f}", f"{mean:.0f}"]],
        )
        # The blocks' spread over rounds is wider than 1 %, so the share is worked out from the
        # recording's own mean cost against each block's bare cell.
        table(
            "5. The timeline's share of each cell's wall time (mean recording cost / bare cell)",
            ["cells", "bare cell ms", "share"],
            [[name, f"{sec * 1e3:.2f}", f"{mean * 1e-6 / sec:.3%}"] for name, sec in cell_seconds.items()],
        )


if __name__ == "__main__":
    main()
