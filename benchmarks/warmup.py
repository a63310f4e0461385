"""Benchmark %gpu_warmup: the first training step in a fresh kernel, cold and after each kind of
warm-up, and what the warm-up itself costs.

    python benchmarks/warmup.py [--trials 3] [--steps 30] [--workloads cnn,transformer,mlp]
                                [--arms cold,targeted,targeted-read,all,background] [--json]

For each workload (a small CNN with SGD in fp32; a transformer encoder block with AdamW under
bf16 autocast; an MLP with Adam in fp32) and each arm, a fresh ipykernel per trial, arms
interleaved, measures inside the kernel: the warm-up's own cost, model + optimizer set-up, the
first, second and steady-state (median of steps 3..N) training step, each after
torch.cuda.synchronize(). Every arm runs ``%load_ext jupyter_gpu`` and ``import torch`` in cells
of their own first (as a notebook does), so neither is in any figure. The kernel's
``JPY_SESSION_NAME`` points to a notebook holding the workload's cells, as jupyter_server sets it.

Arms: ``cold``; ``targeted`` (``%gpu_warmup``: what that notebook uses, the set-up cell at once, as
Run All does, so it waits for what the magic left to the background); ``targeted-read`` (the
same, then the kernel idles 10 s, as while the user reads, before the set-up cell); ``all``
(``%gpu_warmup --all``); ``background`` (``%gpu_warmup --background``, then the kernel idles
10 s, as while the user reads, then the set-up + steps cell). The idle time is the benchmark's own
wait with no cell running: a cell that slept would pause the background warm-up, which waits
while cells run. Set-up is timed from the cell's start, so it includes any wait of that cell for
the warm-up's step in flight. One throw-away kernel runs first so that the OS page cache holds
torch's libraries for every arm. Without a usable GPU it prints the doctor's verdict and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
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
        "torch.bfloat16",
    ),
    "mlp": (
        "nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))",
        "torch.randn(64, 784, device=dev)",
        "torch.optim.Adam(model.parameters())",
        None,
    ),
}
ARMS = {  # name in the table -> the warm-up's line magic (None: no warm-up)
    "cold": None,
    "targeted": "",
    "targeted-read": "",  # the same, then the user reads for READING_S before the set-up cell
    "all": "--all",
    "background": "--background",
}
ARM_TITLES = {
    "cold": "cold",
    "targeted": "after %gpu_warmup",
    "targeted-read": "%gpu_warmup, 10 s before",
    "all": "after %gpu_warmup --all",
    "background": "background, 10 s before",
}
READING_S = 10.0
IMPORT_CELL = "import torch\nfrom torch import nn"
# Timing starts when a cell starts (registered before any warm-up's own callbacks, so that a
# cell's wait for the warm-up's step in flight counts).
CLOCK_CELL = """\
import time
get_ipython().events.register("pre_run_cell", lambda info: globals().__setitem__("_cell_start", time.perf_counter()))
"""
# The report's steps, for the per-step table: the magic's call of warm_up is wrapped to keep it.
CAPTURE_CELL = """\
import jupyter_gpu.kernel.warmup_magic as _wm
_reports = []
_warm_up = _wm.warm_up
_wm.warm_up = lambda *a, **k: _reports.append(_warm_up(*a, **k)) or _reports[-1]
"""
STEPS_OUT = """\
import json as _json
print("STEP_TABLE", _json.dumps([[s.name, s.ms] for r in {reports} for sec in r.sections for s in sec.steps]))
"""
WARMUP_CELL = """\
_t = time.perf_counter()
get_ipython().run_line_magic("gpu_warmup", "--quiet {options}")
print("WARMUP_MS", (time.perf_counter() - _t) * 1e3)
""" + STEPS_OUT.format(reports="_reports")
# What a foreground warm-up left to the background (the optimizers' steps), for the step table.
DEFERRED_CELL = """\
from jupyter_gpu.kernel import warmup_background as _bg
_deferred = [_bg.current().wait()] if _bg.current() else []
""" + STEPS_OUT.format(reports="_deferred")
BACKGROUND_DONE_CELL = """\
from jupyter_gpu.kernel import warmup_background as _bg
_runner = _bg.current()
_report = _runner.wait()
print("WARMUP_MS", sum(s.total_ms for s in _report.sections))
print("DONE_BEFORE_STEPS", _runner.ended <= _steps_start_monotonic)
""" + STEPS_OUT.format(reports="[_report]")
STEP_CELL = """\
import json, time, torch
t0 = _cell_start
_steps_start_monotonic = time.monotonic()
dev = torch.device("cuda")
model = {model}.to(dev)
opt = {optimizer}
x = {batch}
y = torch.randint(0, 10, (x.shape[0],), device=dev)
torch.cuda.synchronize()
setup_ms = (time.perf_counter() - t0) * 1e3
steps = []
for _ in range({steps}):
    t = time.perf_counter()
{forward}
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    steps.append((time.perf_counter() - t) * 1e3)
print("RESULT", json.dumps({{"setup_ms": setup_ms, "steps_ms": steps}}))
"""


def step_cell(workload: str, steps: int) -> str:
    """The workload's set-up and training cell; autocast only in the workload that uses it, so
    that the targeted warm-up sees what such a notebook says."""
    model, batch, optimizer, autocast = MODELS[workload]
    loss = "loss = F.cross_entropy(model(x), y)"
    forward = (
        f"    with torch.autocast('cuda', dtype={autocast}):\n        {loss}" if autocast else f"    {loss}"
    )
    return "F = torch.nn.functional\n" + STEP_CELL.format(
        model=model, batch=batch, optimizer=optimizer, forward=forward, steps=steps
    )


def write_notebook(folder: Path, workload: str, steps: int) -> Path:
    """The workload as a notebook, for the kernel's JPY_SESSION_NAME."""
    import nbformat

    cells = [IMPORT_CELL, step_cell(workload, steps)]
    path = folder / f"{workload}.ipynb"
    path.write_text(
        nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]))
    )
    return path


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


def trial(workload: str, arm: str, steps: int, notebook: Path) -> dict:
    """One fresh kernel: the arm's warm-up, then the training steps."""
    from jupyter_client.manager import start_new_kernel

    env = dict(
        os.environ,
        JPY_SESSION_NAME=str(notebook),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    manager, client = start_new_kernel(kernel_name="python3", env=env, cwd=str(notebook.parent))
    try:
        run_cell(client, "%load_ext jupyter_gpu")
        run_cell(client, CLOCK_CELL)
        run_cell(client, IMPORT_CELL)
        run_cell(client, CAPTURE_CELL)
        result: dict = {"warmup_ms": None, "deferred_ms": 0.0, "done_before_steps": None, "steps": []}
        options = ARMS[arm]
        if options is not None:
            text = run_cell(client, WARMUP_CELL.format(options=options))
            result["warmup_ms"] = float(text.split("WARMUP_MS")[-1].split()[0])
            result["steps"] = json.loads(text.split("STEP_TABLE", 1)[1])
        if arm in ("background", "targeted-read"):
            time.sleep(READING_S)  # the user reads: no cell runs
        text = run_cell(client, step_cell(workload, steps))
        result.update(json.loads(text.split("RESULT", 1)[1]))
        if arm in ("targeted", "targeted-read", "all"):  # what the magic left to the background, once done
            text = run_cell(client, DEFERRED_CELL)
            deferred = json.loads(text.split("STEP_TABLE", 1)[1])
            result["deferred_ms"] = sum(ms for _, ms in deferred)
            result["steps"] += [[f"{name} (in the background)", ms] for name, ms in deferred]
        if arm == "background":  # the background's own time, not the magic's return
            text = run_cell(client, BACKGROUND_DONE_CELL)
            result["warmup_ms"] = float(text.split("WARMUP_MS")[1].split()[0])
            result["done_before_steps"] = text.split("DONE_BEFORE_STEPS")[1].split()[0] == "True"
            result["steps"] = json.loads(text.split("STEP_TABLE", 1)[1])
        return result
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def summarise(runs: list[dict]) -> dict:
    return {
        "warmup_ms": [r["warmup_ms"] for r in runs],
        "deferred_ms": [r["deferred_ms"] for r in runs],
        "setup_ms": [r["setup_ms"] for r in runs],
        "first_ms": [r["steps_ms"][0] for r in runs],
        "second_ms": [r["steps_ms"][1] for r in runs],
        "steady_ms": [statistics.median(r["steps_ms"][2:]) for r in runs],
        "done_before_steps": [r["done_before_steps"] for r in runs],
        "steps": [r["steps"] for r in runs],
    }


def fmt(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    med = statistics.median(values)
    spread = f" ({min(values):,.1f}–{max(values):,.1f})" if len(values) > 1 else ""
    return f"{med:,.1f}{spread}"


def median(s: dict, key: str) -> float:
    return statistics.median(s[key])


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
    rows = [
        [
            workload,
            arm,
            fmt(s["warmup_ms"]),
            fmt(s["setup_ms"]),
            fmt(s["first_ms"]),
            fmt(s["second_ms"]),
            fmt(s["steady_ms"]),
            f"{median(s, 'first_ms') / median(s, 'steady_ms'):,.1f}×",
        ]
        for workload, arms in results.items()
        for arm, s in arms.items()
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(f"\nFirst training step in a fresh kernel, {device}; median (min–max) of {trials} trials per arm")
    for row in [header, ["-" * w for w in widths], *rows]:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    print()
    for workload, arms in results.items():
        cold = arms.get(ARM_TITLES["cold"])
        cold_total = median(cold, "setup_ms") + median(cold, "first_ms") if cold else 0.0
        for arm in ("targeted", "all"):
            warm = arms.get(ARM_TITLES[arm])
            if cold and warm:
                ratio = median(warm, "warmup_ms") / cold_total  # the measure: the magic's own time
                left = median(warm, "deferred_ms")
                print(
                    f"{workload}: {ARM_TITLES[arm]}: warm-up / (cold set-up + cold first step) = {ratio:.2f} "
                    f"(target ≤ 1.2: {'met' if ratio <= 1.2 else 'missed'}); "
                    f"{left / 1e3:,.2f} s more left to the background"
                )
                # Run All: a set-up cell run at once waits for what the warm-up left to the background
                total = sum(median(warm, key) for key in ("warmup_ms", "setup_ms", "first_ms"))
                print(
                    f"{workload}: {ARM_TITLES[arm]}, set-up cell run at once: warm-up + set-up + first step "
                    f"= {total / 1e3:,.2f} s against {cold_total / 1e3:,.2f} s cold ({total / cold_total:.2f}×)"
                )
        read = arms.get(ARM_TITLES["targeted-read"])
        if cold and read:  # what the user waits for in all, the reading aside
            waited = sum(median(read, key) for key in ("warmup_ms", "setup_ms", "first_ms"))
            print(
                f"{workload}: {ARM_TITLES['targeted-read']}: warm-up + set-up + first step = "
                f"{waited / 1e3:,.2f} s against {cold_total / 1e3:,.2f} s cold ({waited / cold_total:.2f}×)"
            )
        bg = arms.get(ARM_TITLES["background"])
        if bg:
            ratio = median(bg, "first_ms") / median(bg, "steady_ms")
            done = sum(bool(d) for d in bg["done_before_steps"])
            print(
                f"{workload}: first/steady after a background warm-up started {READING_S:.0f} s before = "
                f"{ratio:.1f}× (target ≤ 2: {'met' if ratio <= 2 else 'missed'}); it had finished before "
                f"the set-up cell in {done} of {len(bg['done_before_steps'])} trials"
            )


def print_steps(results: dict) -> None:
    """What each warm-up spent its time on: every step's median over the trials, largest first."""
    for workload, arms in results.items():
        for arm, s in arms.items():
            by_step: dict[str, list[float]] = {}
            for steps in s["steps"]:
                for name, ms in steps:
                    by_step.setdefault(name, []).append(ms)
            if not by_step:
                continue
            print(f"\n{workload}, {arm}: the warm-up's steps, median ms of {len(s['steps'])} trials")
            for name, values in sorted(by_step.items(), key=lambda kv: -statistics.median(kv[1])):
                print(f"  {statistics.median(values):>9,.1f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workloads", default=",".join(MODELS))
    parser.add_argument("--arms", default=",".join(ARMS), help=f"some of {','.join(ARMS)}")
    parser.add_argument(
        "--json", action="store_true", help="print the raw figures as JSON instead of the table"
    )
    args = parser.parse_args()
    workloads, arms = args.workloads.split(","), args.arms.split(",")
    unknown = [w for w in workloads if w not in MODELS] + [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(
            f"unknown workload or arm: {', '.join(unknown)} (workloads: {', '.join(MODELS)}; arms: {', '.join(ARMS)})"
        )

    from jupyter_gpu.doctor import diagnose

    report = diagnose(check_server=False)
    if not report.cuda_ready:
        print(f"no GPU, nothing to benchmark. {report.verdict}")
        return
    with tempfile.TemporaryDirectory(prefix="warmup-bench-") as folder:
        notebooks = {w: write_notebook(Path(folder), w, args.steps) for w in workloads}
        trial(
            workloads[0], "cold", 3, notebooks[workloads[0]]
        )  # page cache: every arm reads torch from memory
        raw: dict[str, dict[str, list[dict]]] = {w: {a: [] for a in arms} for w in workloads}
        for _ in range(args.trials):
            for workload in workloads:
                for arm in arms:
                    raw[workload][arm].append(trial(workload, arm, args.steps, notebooks[workload]))
    results = {w: {ARM_TITLES[a]: summarise(runs) for a, runs in by_arm.items()} for w, by_arm in raw.items()}
    device = report.verdict.removeprefix("CUDA ready: ")
    if args.json:
        print(json.dumps({"device": device, "results": results}))
    else:
        print_table(device, results, args.trials)
        print_steps(results)


if __name__ == "__main__":
    main()
