"""For tests/test_gpu_plan_gpu.py: each measurement in a process of its own, so that the test
process never initialises CUDA and every real step starts from an empty allocator.

    python -m support.plan_gpu real MODEL STRATEGY BATCH [BUDGET]   -> {"peak": bytes} or {"oom": true}
    python -m support.plan_gpu plan MODEL STRATEGIES BATCH cuda|cpu [BUDGET]  -> {"rows": [...]}

``real`` runs the training step the way a notebook would (two steps; the second's
``max_memory_allocated`` above what was allocated before the model; then the median time of five
more), with BUDGET as PyTorch's own
limit on top of what the process already holds (its cuBLAS workspace). ``plan`` runs ``%gpu_plan``
through IPython, after initialising CUDA (``cuda``: fake CUDA tensors) or not (``cpu``: the CPU
stand-in). With BUDGET, ``plan`` adds ``--max-batch``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from jupyter_gpu.recompute import checkpoint_blocks
from support.plan_models import GPT, cnn, mlp


@dataclass(frozen=True)
class Workload:
    build: Callable[[], nn.Module]
    batch: str  # expressions of B, for %gpu_plan and for the real step alike
    target: str


VOCAB, CONTEXT = 32000, 1024
WORKLOADS = {
    "gpt": Workload(
        lambda: GPT(vocab=VOCAB, width=1024, depth=8, heads=16, context=CONTEXT),
        f"torch.randint(0, {VOCAB}, (B, {CONTEXT}))",
        f"torch.randint(0, {VOCAB}, (B, {CONTEXT}))",
    ),
    "cnn": Workload(lambda: cnn(channels=64), "torch.randn(B, 3, 224, 224)", "torch.randint(0, 10, (B,))"),
    "mlp": Workload(
        lambda: mlp(width=4096, depth=6, inputs=4096), "torch.randn(B, 4096)", "torch.randint(0, 10, (B,))"
    ),
}


def real(name: str, strategy: str, batch: int, budget: int | None) -> dict[str, object]:
    work = WORKLOADS[name]
    torch.cuda.init()
    torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")  # cuBLAS's workspace, first
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    if budget is not None:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((before + budget) / total)
    try:
        model = work.build().cuda()
        if strategy in ("checkpoint", "sac"):
            checkpoint_blocks(model, selective=strategy == "sac")
        optimizer = torch.optim.AdamW(model.parameters())
        x = eval(work.batch, {"torch": torch, "B": batch}).cuda()
        y = eval(work.target, {"torch": torch, "B": batch}).cuda()

        def step() -> None:
            with torch.autocast("cuda", torch.bfloat16, enabled=strategy == "amp"):
                out = model(x)
                loss = F.cross_entropy(out.flatten(0, -2) if out.dim() > 2 else out, y.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        seconds = []
        for _ in range(5):  # what the plan's roofline estimate is compared with
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    except torch.OutOfMemoryError:
        return {"oom": True}
    return {"peak": peak, "step_seconds": statistics.median(seconds)}


def plan(name: str, strategies: str, batch: int, device: str, budget: int | None) -> dict[str, object]:
    from IPython.core.interactiveshell import InteractiveShell

    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
    from jupyter_gpu.kernel.plan.magic import register

    shell = InteractiveShell.instance()
    register(shell)  # the plan magic alone: the device has no Jupyter (no ipykernel for the rest)
    work = WORKLOADS[name]
    shell.user_ns.update(torch=torch, build=work.build, B=batch)
    memory = f"--device-memory {budget} --max-batch" if budget is not None else "--device-memory 140GiB"
    result = shell.run_line_magic(
        "gpu_plan",
        f'build --input "{work.batch}" --target "{work.target}" --loss cross_entropy '
        f"--strategies {strategies} {memory}",
    )
    return {"rows": result.rows, "notes": result.notes, "cuda_initialised": torch.cuda.is_initialized()}


if __name__ == "__main__":
    kind, name, what, batch, *rest = sys.argv[1:]
    if kind == "real":
        answer = real(name, what, int(batch), int(rest[0]) if rest else None)
    else:
        answer = plan(name, what, int(batch), rest[0], int(rest[1]) if len(rest) > 1 else None)
    print(json.dumps(answer))
