"""Benchmark %gpu_warmup: the first training step in a fresh kernel, cold and after a warm-up.

    python benchmarks/warmup.py [--trials 3] [--steps 30] [--workloads cnn,transformer,mlp] [--json]

For each workload (a small CNN with SGD in fp32; a transformer encoder block with AdamW under
bf16 autocast; an MLP with Adam in fp32) and each arm (cold; after
`%gpu_warmup`), a fresh ipykernel per trial, arms interleaved, measures inside the kernel:
the warm-up's own cost, model + optimizer set-up, the first, second and steady-state (median of
steps 3..N) training step, each after torch.cuda.synchronize(). Both arms `%load_ext jupyter_gpu`
so that only the warm-up differs. One throw-away kernel runs first so that the OS page cache
holds torch's libraries for every arm (the first process after boot pays disk reads).
Without a usable GPU it prints the doctor's verdict and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

# workload -> (model, batch, optimizer, autocast dtype or None): the three models of issue #17.
MODELS = {
    "cnn": (
        "nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),"
        " nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),"
        " nn.Flatten(), nn.Linear(64, 10))",
        "torch.randn(64, 3, 32, 32, device=dev)",
        "torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)",
        None,
    ),
    "transformer": (
        "nn.Sequential(nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True), nn.Flatten(),"
        " nn.Linear(128 * 256, 10))",
        "torch.randn(32, 128, 256, device=dev)",
        "torch.optim.AdamW(model.parameters())",
        "low",
    ),
    "mlp": (
        "nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))",
        "torch.randn(64, 784, device=dev)",
        "torch.optim.Adam(model.parameters())",
        None,
    ),
}
WARMUP_CELL = """\
import time
_t = time.perf_counter()
get_ipython().run_line_magic("gpu_warmup", "--quiet")
print("WARMUP_MS", (time.perf_counter() - _t) * 1e3)
"""
STEP_CELL = """\
import json, time, torch
nn, F = torch.nn, torch.nn.functional
t0 = time.perf_counter()
dev = torch.device("cuda")
low = torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16
model = {model}.to(dev)
opt = {optimizer}
x = {batch}
y = torch.randint(0, 10, (x.shape[0],), device=dev)
torch.cuda.synchronize()
setup_ms = (time.perf_counter() - t0) * 1e3
steps = []
for _ in range({steps}):
    t = time.perf_counter()
    with torch.autocast("cuda", dtype={autocast}, enabled={autocast} is not None):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    steps.append((time.perf_counter() - t) * 1e3)
print("RESULT", json.dumps({{"setup_ms": setup_ms, "steps_ms": steps}}))
"""


def run_cell(client, code: str, timeout: float = 600) -> str:
    """Execute in the kernel; return its stdout, raising if the cell failed."""
    out: list[str] = []

    def collect(msg: dict) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = client.execute_interactive(code, timeout=timeout, output_hook=collect)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content'].get('ename')}: {reply['content'].get('evalue')}")
    return "".join(out)


def trial(workload: str, warm: bool, steps: int) -> dict:
    """One fresh kernel: optional warm-up, then the training steps."""
    from jupyter_client.manager import start_new_kernel

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    try:
        run_cell(client, "%load_ext jupyter_gpu")
        result: dict = {"warmup_ms": None}
        if warm:
            text = run_cell(client, WARMUP_CELL)
            result["warmup_ms"] = float(text.split("WARMUP_MS")[-1])
        model, batch, optimizer, autocast = MODELS[workload]
        cell = STEP_CELL.format(model=model, batch=batch, optimizer=optimizer, autocast=autocast, steps=steps)
        text = run_cell(client, cell)
        result.update(json.loads(text.split("RESULT", 1)[1]))
        return result
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def summarise(runs: list[dict]) -> dict:
    return {
        "warmup_ms": [r["warmup_ms"] for r in runs],
        "setup_ms": [r["setup_ms"] for r in runs],
        "first_ms": [r["steps_ms"][0] for r in runs],
        "second_ms": [r["steps_ms"][1] for r in runs],
        "steady_ms": [statistics.median(r["steps_ms"][2:]) for r in runs],
    }


def fmt(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    spread = f" ({min(values):,.1f}–{max(values):,.1f})" if len(values) > 1 else ""
    return f"{med:,.1f}{spread}"


def print_table(device: str, results: dict, trials: int) -> None:
    header = [
        "workload",
        "arm",
        "warm-up ms",
        "set-up ms",
        "1st step ms",
        "2nd step ms",
        "steady ms",
        "1st/steady",
    ]
    rows = []
    for workload, arms in results.items():
        for arm, s in arms.items():
            ratio = statistics.median(s["first_ms"]) / statistics.median(s["steady_ms"])
            rows.append(
                [
                    workload,
                    arm,
                    fmt(s["warmup_ms"]),
                    fmt(s["setup_ms"]),
                    fmt(s["first_ms"]),
                    fmt(s["second_ms"]),
                    fmt(s["steady_ms"]),
                    f"{ratio:,.0f}×",
                ]
            )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(f"\nFirst training step in a fresh kernel, {device}; median (min–max) of {trials} trials per arm")
    for row in [header, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    for workload, arms in results.items():
        warm = arms["after %gpu_warmup"]
        ratio = statistics.median(warm["first_ms"]) / statistics.median(warm["steady_ms"])
        print(
            f"{workload}: first step after %gpu_warmup is {ratio:,.0f}× steady state "
            f"(target ≤ 10×: {'met' if ratio <= 10 else 'missed'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workloads", default=",".join(MODELS))
    parser.add_argument(
        "--json", action="store_true", help="print the raw figures as JSON instead of the table"
    )
    args = parser.parse_args()
    workloads = args.workloads.split(",")

    from jupyter_gpu.doctor import diagnose

    report = diagnose(check_server=False)
    if not report.cuda_ready:
        print(f"no GPU, nothing to benchmark. {report.verdict}")
        return
    trial(workloads[0], warm=False, steps=3)  # page cache: every arm then reads torch from memory
    arms = {"cold": False, "after %gpu_warmup": True}
    raw: dict[str, dict[str, list[dict]]] = {w: {a: [] for a in arms} for w in workloads}
    for _ in range(args.trials):
        for workload in workloads:
            for arm, warm in arms.items():
                raw[workload][arm].append(trial(workload, warm, args.steps))
    results = {w: {a: summarise(runs) for a, runs in by_arm.items()} for w, by_arm in raw.items()}
    device = report.verdict.removeprefix("CUDA ready: ")
    if args.json:
        print(json.dumps({"device": device, "results": results}))
    else:
        print_table(device, results, args.trials)


if __name__ == "__main__":
    main()
