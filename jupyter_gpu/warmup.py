"""The warm-up: pay CUDA's one-time start-up costs before the first real step.

Under lazy module loading each kernel family loads on first use; cuBLAS, cuBLASLt, cuDNN and
attention build handles and choose algorithms on their first call; the first optimizer
constructor imports ``torch._dynamo`` (seconds of CPU). A warm-up moves those costs to a moment
the user picks: it does not remove them, and it cannot load the kernels of a particular model,
which is what ``%%gpu_warmup``'s cell form (run the user's own step once) is for.
It never sets ``CUDA_MODULE_LOADING=EAGER``: that makes the context three times larger.

Plain library code (no IPython): ``%gpu_warmup`` (``kernel/warmup_magic.py``) and
``jupyter gpu warmup`` both run these steps.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .analysis.units import format_bytes
from .report import Report, Reportable, Row
from .report import Section as ReportSection

# Warmth belongs to the process (CUDA state is per process), not to one extension load.
_first_warmup_ms: dict[int, float] = {}
_FORK_LAUNCHERS = {
    "accelerate": "accelerate's notebook_launcher",
    "lightning": "Lightning's ddp_notebook",
    "pytorch_lightning": "Lightning's ddp_notebook",
    "ignite": "ignite's Parallel",
}


@dataclass
class Step:
    name: str
    ms: float
    error: str | None = None


@dataclass
class Section:
    """One table block: a device's warm-up steps, or a cell's cold and warm runs."""

    title: str
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    has_total: bool = True  # a cell's cold and warm runs do not add up to anything

    @property
    def total_ms(self) -> float:
        return sum(s.ms for s in self.steps)


@dataclass(repr=False)
class WarmupReport(Reportable):
    sections: list[Section]
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [
            f"{s.title} warm in {s.total_ms:,.0f} ms"
            if s.has_total
            else f"{s.title}: " + ", ".join(f"{step.name} {step.ms:,.0f} ms" for step in s.steps)
            for s in self.sections
        ]
        return "gpu_warmup: " + "; ".join(parts)

    def as_report(self) -> Report:
        return Report([_block(s) for s in self.sections], notes=self.notes, css_class="jupyter-gpu-warmup")


def _block(section: Section) -> ReportSection:
    rows = [Row(s.name, f"{s.ms:,.1f} ms", f"FAILED: {s.error}" if s.error else "") for s in section.steps]
    if section.has_total:
        rows.append(Row("total", f"{section.total_ms:,.1f} ms", strong=True))
    return ReportSection(section.title, rows, section.notes)


def _steps(torch: Any, index: int, nccl: bool, compile: bool) -> list[tuple[str, Callable[[], None]]]:
    """The warm-up, as (label, action) pairs for one device; each action touches one library."""
    F = torch.nn.functional
    dev = torch.device("cuda", index)
    major, _ = torch.cuda.get_device_capability(index)
    low = torch.bfloat16 if major >= 8 else torch.float16  # bf16 only where the GPU has it
    halves = [torch.float16] + ([torch.bfloat16] if major >= 8 else [])
    low_name = str(low).removeprefix("torch.")

    def randn(*shape: int, dtype: Any = torch.float32) -> Any:
        return torch.randn(*shape, device=dev, dtype=dtype)

    def elementwise() -> None:
        x = randn(1 << 16)
        (x * 2 + 1).relu_().sum().item()
        torch.rand(1024, device=dev).max().item()

    def matmul(dtype: Any) -> Callable[[], None]:
        return lambda: randn(256, 256, dtype=dtype) @ randn(256, 256, dtype=dtype)

    def linear() -> None:
        for dtype in halves:
            F.linear(randn(64, 256, dtype=dtype), randn(256, 256, dtype=dtype), randn(256, dtype=dtype))

    def conv() -> None:
        y = F.conv2d(randn(8, 3, 32, 32), randn(16, 3, 3, 3), padding=1)
        F.adaptive_avg_pool2d(F.relu(F.batch_norm(y, None, None, training=True)), 1)

    def conv_autocast() -> None:
        with torch.autocast("cuda", dtype=low):
            conv()

    def attention() -> None:
        q = randn(2, 4, 128, 64, dtype=low)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)

    def train_step() -> None:
        nn = torch.nn
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, 10),
        ).to(dev)
        opt = torch.optim.AdamW(model.parameters())
        with torch.autocast("cuda", dtype=low):
            loss = F.cross_entropy(model(randn(4, 3, 16, 16)), torch.randint(0, 10, (4,), device=dev))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    steps = [
        ("context", lambda: torch.empty(1, device=dev)),
        ("elementwise, reduction, RNG", elementwise),
        *[(f"matmul {str(d).removeprefix('torch.')} (cuBLAS)", matmul(d)) for d in [torch.float32, *halves]],
        ("linear with bias, half precision (cuBLASLt)", linear),
        ("conv2d + batchnorm fp32 (cuDNN)", conv),
        (f"conv2d + batchnorm under {low_name} autocast", conv_autocast),
        (f"scaled-dot-product attention {low_name}", attention),
        ("backward + AdamW step (first AdamW imports torch._dynamo)", train_step),
    ]
    if nccl:
        steps.append(
            (
                "NCCL communicator (this process only)",
                lambda: torch.cuda.nccl.all_reduce([torch.ones(1, device=dev)]),
            )
        )
    if compile:
        steps.append(
            (
                "torch.compile (Dynamo, Inductor, Triton)",
                lambda: torch.compile(lambda x: F.gelu(x) * 2 + 1)(randn(64, 64)),
            )
        )
    return steps


def _process_memory(torch: Any, index: int) -> int | None:
    """This process's memory on the GPU as NVML counts it (context included), if NVML can say."""
    from .nvml.holders import device_view
    from .torch_state import nvml_uuid

    uuid = nvml_uuid(torch, index)
    view, _ = device_view(uuid) if uuid else (None, None)
    return view.this_kernel_bytes if view else None


def warm_device(torch: Any, index: int, nccl: bool = False, compile: bool = False) -> Section:
    """Run every step on one device, timing each (synchronised) and carrying on past failures."""
    section = Section(f"cuda:{index}")
    with torch.cuda.device(index):
        for name, action in _steps(torch, index, nccl, compile):
            start = time.perf_counter()
            error = None
            try:
                action()
                torch.cuda.synchronize(index)
            except Exception as exc:  # one library failing must not hide what the others cost
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            section.steps.append(Step(name, (time.perf_counter() - start) * 1e3, error))
            if error and name == "context":
                break
    section.title = f"cuda:{index} {torch.cuda.get_device_name(index)}"
    reserved = torch.cuda.memory_reserved(index)
    used = _process_memory(torch, index)
    memory = f"allocator cache {format_bytes(reserved)}"
    if used is not None:
        memory += f"; this process holds {format_bytes(used)} on the GPU (CUDA context included)"
    section.notes.append(memory)
    first = _first_warmup_ms.get(index)
    if first is None:
        _first_warmup_ms[index] = section.total_ms
    else:
        section.notes.append(f"already warm: the first warm-up in this process took {first:,.0f} ms")
    return section


def warm_up(devices: list[int], nccl: bool = False, compile: bool = False) -> WarmupReport:
    """Warm each device in turn; usable without IPython (scripts, benchmarks)."""
    import torch

    report = WarmupReport([warm_device(torch, i, nccl, compile) for i in devices])
    launchers = sorted({v for k, v in _FORK_LAUNCHERS.items() if k in sys.modules})
    if launchers:
        report.notes.append(
            f"CUDA is now initialised in this kernel, so fork-based launchers ({', '.join(launchers)}) "
            "will refuse to start; %ddp_launch spawns its workers instead."
        )
    return report


def parse_devices(text: str, count: int) -> list[int]:
    """``all`` or comma-separated GPU indices below ``count``, each once, in the order given.

    Raises ValueError naming the valid choices; callers add where the GPUs were counted.
    """
    if text.strip() == "all":
        return list(range(count))
    indices = [t.strip() for t in text.split(",") if t.strip()]
    if not indices or not all(t.isdigit() and int(t) < count for t in indices):
        raise ValueError(
            f"--devices {text!r}: give GPU indices from 0 to {count - 1} separated by commas, or 'all'"
        )
    return list(dict.fromkeys(int(t) for t in indices))
