"""Benchmark %%gpu_profile's own cost: a training loop run plain and under the magic.

    python benchmarks/gpu_profile.py [--trials 5] [--steps 50] [--record-shapes] [--memory]

In one IPython shell with the extension loaded, a small CNN trains for N steps (on the GPU where
there is one, else on the CPU), alternately as a plain cell and under ``%%gpu_profile``; each
run's wall time includes the final torch.cuda.synchronize() and, under the magic, exporting
the trace, reading it back and the analysis. One untimed run of each first pays start-up costs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

SETUP = """\
import torch
nn, F = torch.nn, torch.nn.functional
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(64, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 3, 32, 32, device=dev)
y = torch.randint(0, 10, (64,), device=dev)
"""
LOOP = """\
for _ in range({steps}):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if dev.type == "cuda":
    torch.cuda.synchronize()
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--record-shapes", action="store_true")
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()

    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "jupyter_gpu")
    shell.run_cell(SETUP)
    loop = LOOP.format(steps=args.steps)
    folder = tempfile.mkdtemp(prefix="gpu-profile-bench-")
    options = f"--trace {folder}" + " --record-shapes" * args.record_shapes + " --memory" * args.memory

    def timed(profiled: bool) -> float:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            if profiled:
                shell.run_cell_magic("gpu_profile", options, loop)
            else:
                shell.run_cell(loop)
        return (time.perf_counter() - start) * 1e3

    timed(False), timed(True)  # start-up costs
    plain, profiled = [], []
    for _ in range(args.trials):
        plain.append(timed(False))
        profiled.append(timed(True))
    device = shell.user_ns["dev"]
    name = shell.user_ns["torch"].cuda.get_device_name() if device.type == "cuda" else "CPU"
    p, q = statistics.median(plain), statistics.median(profiled)
    print(f"\n%%gpu_profile {options.replace(folder, '<dir>')} over {args.steps} CNN steps on {name}")
    print(f"median of {args.trials} trials, ms")
    print(f"plain cell        {p:10,.1f}  ({p / args.steps:,.2f} per step)")
    print(f"under the magic   {q:10,.1f}  ({q / args.steps:,.2f} per step)")
    print(f"overhead          {q - p:10,.1f}  ({(q - p) / p:.0%} of the plain cell)")


if __name__ == "__main__":
    main()
