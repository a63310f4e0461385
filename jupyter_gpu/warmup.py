"""The warm-up: pay CUDA's one-time start-up costs before the first real step.

Under lazy module loading each kernel family loads on first use; cuBLAS, cuBLASLt, cuDNN and
attention build handles and choose algorithms on their first call; the first optimizer
constructor imports ``torch._dynamo`` (seconds of CPU). cuDNN and cuBLAS choose kernels by
shape, so the warm-up trains small CNNs, MLPs and transformer blocks of the shapes first
notebooks use (forward, backward, each common optimizer's first and later steps), in fp32 and
under autocast. A warm-up moves those costs to a moment the user picks: it does not remove them,
and it cannot know every shape of a particular model, which is what ``%%gpu_warmup``'s cell form
(run the user's own step once) is for.
It never sets ``CUDA_MODULE_LOADING=EAGER``: that makes the context three times larger.

Plain library code (no IPython): ``%gpu_warmup`` (``kernel/warmup_magic.py``) and
``jupyter gpu warmup`` both run these steps.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


# Common shapes of first notebooks (CIFAR/MNIST-sized CNNs, MLPs, small transformers): under lazy
# loading cuDNN and cuBLAS load one kernel per algorithm they pick, and they pick by shape, so the
# warm-up trains on the shapes people start with rather than on one tiny example.
_IMAGES = ((3, 32, 64), (3, 32, 16), (1, 28, 64))  # (channels, size, batch)
_WIDTHS = (64, 128, 256, 512, 1024)
_LINEARS = (
    *[(i, o) for i in _WIDTHS for o in (*_WIDTHS, 10)],
    (784, 256),
    (784, 512),
    (4096, 4096),
    (8192, 10),
    (32768, 10),  # a flattened feature map into a classifier head
)
_TRANSFORMERS = ((256, 8, 1024, 128, 32, "relu", False), (512, 8, 2048, 128, 16, "gelu", True))


def _steps(torch: Any, index: int, nccl: bool, compile: bool) -> list[tuple[str, Callable[[], None]]]:
    """The warm-up, as (label, action) pairs for one device; each action touches one family."""
    F = torch.nn.functional
    nn = torch.nn
    dev = torch.device("cuda", index)
    major, _ = torch.cuda.get_device_capability(index)
    low = torch.bfloat16 if major >= 8 else torch.float16  # bf16 only where the GPU has it
    halves = [torch.float16] + ([torch.bfloat16] if major >= 8 else [])
    low_name = str(low).removeprefix("torch.")

    def randn(*shape: int, dtype: Any = torch.float32) -> Any:
        return torch.randn(*shape, device=dev, dtype=dtype)

    def labels(n: int, classes: int = 10) -> Any:
        return torch.randint(0, classes, (n,), device=dev)

    def train(model: Any, x: Any, y: Any) -> None:
        """Forward, cross-entropy and backward, in fp32 and under autocast: both kernel sets."""
        for autocast in (False, True):
            with torch.autocast("cuda", dtype=low, enabled=autocast):
                loss = F.cross_entropy(model(x), y)
            loss.backward()

    def elementwise() -> None:
        x = randn(1 << 16)
        (x * 2 + 1).relu_().sum().item()
        torch.rand(1024, device=dev).max().item()

    def matmul(dtype: Any) -> Callable[[], None]:
        return lambda: randn(256, 256, dtype=dtype) @ randn(256, 256, dtype=dtype)

    def cnns() -> None:
        for channels, size, batch in _IMAGES:
            model = nn.Sequential(
                nn.Conv2d(channels, 32, 3, padding=1),
                nn.BatchNorm2d(32),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1),
                nn.BatchNorm2d(64),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(64, 10),
            ).to(dev)
            train(model, randn(batch, channels, size, size), labels(batch))
        resnet = nn.Sequential(  # strided, 1x1 and 7x7 convs, group norm, average pooling
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
            nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False),
            nn.GroupNorm(8, 128),
            nn.SiLU(),
            nn.Conv2d(128, 256, 1, bias=False),
            nn.BatchNorm2d(256),
            nn.AvgPool2d(2),
            nn.Flatten(),
            nn.Dropout(0.1),
            nn.Linear(256 * 4 * 4, 10),
        ).to(dev)
        train(resnet, randn(16, 3, 64, 64), labels(16))

    def linears() -> None:
        for batch in (64, 256):
            for fan_in, fan_out in _LINEARS:
                layer = nn.Linear(fan_in, fan_out, device=dev)
                head = nn.Linear(fan_out, 10, device=dev) if fan_out != 10 else nn.Identity()
                train(nn.Sequential(layer, nn.ReLU(), head), randn(batch, fan_in), labels(batch))
        mlp = nn.Sequential(
            nn.Linear(512, 512), nn.GELU(), nn.LayerNorm(512), nn.Dropout(0.1), nn.Tanh(), nn.Linear(512, 10)
        ).to(dev)
        train(mlp, randn(64, 512), labels(64))

    def transformers() -> None:
        for d, heads, ff, seq, batch, activation, norm_first in _TRANSFORMERS:
            model = nn.Sequential(
                nn.Embedding(1000, d),
                nn.TransformerEncoderLayer(
                    d, heads, ff, batch_first=True, activation=activation, norm_first=norm_first
                ),
                nn.Linear(d, 1000),
                nn.Flatten(0, 1),  # one prediction per token
            ).to(dev)
            tokens = torch.randint(0, 1000, (batch, seq), device=dev)
            train(model, tokens, labels(batch * seq, 1000))

    def attention() -> None:
        q = randn(2, 4, 128, 64, dtype=low)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)

    def optimizers() -> None:
        """Each common optimizer's first step (state creation) and second (the steady path)."""
        optim = torch.optim
        variants: list[tuple[Callable[..., Any], dict[str, Any]]] = [
            (optim.SGD, {"lr": 0.1}),
            (optim.SGD, {"lr": 0.1, "momentum": 0.9}),
            (optim.SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4}),
            (optim.Adam, {}),
            (optim.Adam, {"weight_decay": 1e-4}),
            (optim.AdamW, {}),
        ]
        for dtype, fused in ((torch.float32, False), (low, False), (torch.float32, True)):
            params = [nn.Parameter(randn(n, dtype=dtype)) for n in (10, 1000, 100_000)]
            for make, options in variants:
                opt = make(params, **options, **({"fused": True} if fused else {}))
                for _ in range(2):
                    for p in params:
                        p.grad = torch.randn_like(p)
                    nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()
                opt.zero_grad(set_to_none=False)

    def grad_scaler() -> None:
        model = nn.Linear(64, 10).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(randn(64, 64)), labels(64))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    steps = [
        ("context", lambda: torch.empty(1, device=dev)),
        ("elementwise, reduction, RNG", elementwise),
        *[(f"matmul {str(d).removeprefix('torch.')} (cuBLAS)", matmul(d)) for d in [torch.float32, *halves]],
        (f"scaled-dot-product attention {low_name}", attention),
        (
            "optimizers: SGD, Adam, AdamW, foreach and fused, first and later steps "
            "(the first one imports torch._dynamo)",
            optimizers,
        ),
        ("fp16 GradScaler step", grad_scaler),
        (f"CNN training steps: conv, norms, pooling, cross-entropy (fp32, {low_name})", cnns),
        (f"linear layers of common widths, forward + backward (fp32, {low_name})", linears),
        (f"transformer encoder blocks, forward + backward (fp32, {low_name})", transformers),
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
    """Warm every device, in parallel; usable without IPython (scripts, benchmarks)."""
    import torch

    if len(devices) > 1:  # one thread per device: kernel loading and cuDNN set-up overlap
        with ThreadPoolExecutor(len(devices), thread_name_prefix="gpu-warmup") as pool:
            sections = list(pool.map(lambda i: warm_device(torch, i, nccl, compile), devices))
    else:
        sections = [warm_device(torch, i, nccl, compile) for i in devices]
    report = WarmupReport(sections)
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
