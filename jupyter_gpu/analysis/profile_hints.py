"""The profile's hints: each a rule over the trace's events with its evidence and a fix.

A rule returns None when it does not apply. None needs a GPU to be tested: the tests plant
each problem in synthetic events.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from .profile_trace import CONV_OPS, MATMUL_OPS, Trace
from .units import MiB, format_bytes, format_us

FUSED_ATTENTION = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
)
MATH_ATTENTION = "aten::_scaled_dot_product_attention_math"
HALF_TYPES = frozenset({"c10::BFloat16", "c10::Half"})
# What a sync inside an operator usually comes from in the user's code.
SYNC_SOURCES = {
    "aten::item": "`.item()`",
    "aten::_local_scalar_dense": "`.item()`",
    "aten::is_nonzero": "`if tensor:`",
    "aten::to": "`.cpu()` / `.to('cpu')`",
    "aten::_to_copy": "`.cpu()` / `.to('cpu')`",
    "aten::copy_": "a copy to the host",
    "aten::nonzero": "`nonzero()` / boolean indexing",
    "aten::masked_select": "boolean indexing",
}

# Thresholds, each chosen so that a clean bf16 training loop stays quiet.
IDLE_SHARE = 0.5  # the GPU idle more than half of the cell
MIN_WINDOW_US = 10_000.0  # cells shorter than 10 ms get no idle-time hints
TINY_KERNEL_US = 10.0  # a kernel shorter than a launch (~5-10 µs)
MANY_KERNELS = 200
HEAVY_SHARE = 0.2  # a family of operators worth a hint: a fifth of GPU time
SHAPE_SHARE = 0.05  # an odd-shaped matmul worth naming: 5 % of GPU time
COPY_SHARE = 0.05  # pageable copies worth a hint: 5 % of the cell
MANY_SYNCS = 10
MANY_CONVS = 10
LAUNCH_BOUND = "many tiny kernels: launch-bound"  # the title profile_activity adds its figures to


@dataclass(frozen=True)
class Facts:
    """Settings the trace does not record, read by the magic when the cell ends."""

    tf32_matmul: bool = False  # torch.backends.cuda.matmul.allow_tf32
    tf32_cudnn: bool = True  # torch.backends.cudnn.allow_tf32 (torch's default)
    cudnn_benchmark: bool = False


@dataclass(frozen=True)
class Hint:
    title: str
    evidence: str
    fix: str


def _idle_input_pipeline(t: Trace, facts: Facts) -> Hint | None:
    if t.window_us < MIN_WINDOW_US or 1 - t.busy_share < IDLE_SHARE or _launch_bound(t):
        return None
    during: dict[str, float] = defaultdict(float)
    for start, end in t.idle():
        for name, us in t.cpu_during(start, end).items():
            during[name] += us
    idle_us = t.window_us - t.busy_us
    loader = sum(us for name, us in during.items() if "DataLoader" in name)
    where = (
        f"{format_us(loader)} of it in the DataLoader fetching batches"
        if loader >= 0.3 * idle_us
        else "meanwhile the CPU ran "
        + (", ".join(sorted(during, key=lambda n: -during[n])[:2]) or "Python code")
    )
    return Hint(
        "GPU idle most of the time while the CPU works: input pipeline",
        f"the GPU was idle {1 - t.busy_share:.0%} of {format_us(t.window_us)}; {where}",
        "prepare batches in parallel: `DataLoader(..., num_workers=4, pin_memory=True, "
        "persistent_workers=True)`; move preprocessing onto the GPU or out of the loop",
    )


def _kernel_durations(t: Trace) -> list[float]:
    return [float(e.get("dur", 0)) for e in t.gpu_events if e.get("cat") == "kernel"]


def _launch_bound(t: Trace) -> bool:
    kernels = _kernel_durations(t)
    return (
        len(kernels) >= MANY_KERNELS
        and statistics.median(kernels) < TINY_KERNEL_US
        and 1 - t.busy_share >= IDLE_SHARE
    )


def _launch_bound_hint(t: Trace, facts: Facts) -> Hint | None:
    if not _launch_bound(t):
        return None
    kernels = _kernel_durations(t)
    return Hint(
        LAUNCH_BOUND,
        f"{len(kernels):,} kernels, median {format_us(statistics.median(kernels))} each; the GPU was busy "
        f"only {t.busy_share:.0%} of the time: the CPU launches kernels more slowly than the GPU runs them",
        "fuse the small operations with `torch.compile(model)`, or replay the step as a CUDA graph "
        '(`torch.compile(model, mode="reduce-overhead")` or `torch.cuda.graphs`); larger batches help too',
    )


def _fp32_tensor_cores(t: Trace, facts: Facts) -> Hint | None:
    if t.compute_major() < 7 or not t.busy_us:
        return None
    fp32: dict[str, float] = defaultdict(float)
    for key, op in t.family.items():
        tf32 = facts.tf32_matmul if op.name in MATMUL_OPS else facts.tf32_cudnn
        if op.tensor_type == "float" and not (tf32 and t.compute_major() >= 8):
            fp32[op.name] += t.family_us[key]
    total = sum(fp32.values())
    if total < HEAVY_SHARE * t.busy_us:
        return None
    names = ", ".join(n for n, _ in sorted(fp32.items(), key=lambda kv: -kv[1]))
    tf32_fix = ' or `torch.set_float32_matmul_precision("high")` (TF32)' if t.compute_major() >= 8 else ""
    return Hint(
        "fp32 matmuls and convolutions: Tensor Cores unused",
        f"{names} in fp32 took {format_us(total)}, {total / t.busy_us:.0%} of GPU time",
        f"run the cell under `%%amp` (bf16 autocast){tf32_fix}",
    )


def _odd_shapes(t: Trace, facts: Facts) -> Hint | None:
    if not t.busy_us:
        return None
    found: dict[str, float] = defaultdict(float)
    for key, op in t.family.items():
        if op.name not in MATMUL_OPS or op.tensor_type not in HALF_TYPES:
            continue
        matrices = [d for d in op.dims or [] if isinstance(d, list) and len(d) >= 2]
        odd = sorted({n for m in matrices[-2:] for n in m[-2:] if isinstance(n, int) and n % 8})
        if odd:
            shapes = " × ".join(str(m) for m in matrices[-2:])
            found[f"{op.name} {shapes} ({', '.join(map(str, odd))})"] += t.family_us[key]
    worst = [
        (k, us) for k, us in sorted(found.items(), key=lambda kv: -kv[1]) if us >= SHAPE_SHARE * t.busy_us
    ]
    if not worst:
        return None
    evidence = "; ".join(f"{k}: {us / t.busy_us:.0%} of GPU time" for k, us in worst[:3])
    return Hint(
        "matmul dimensions not multiples of 8: Tensor Cores run them slowly",
        f"{evidence} (the dimensions in brackets are not multiples of 8)",
        "pad those dimensions (hidden size, vocabulary, batch) to multiples of 8, better 64",
    )


def _pageable_copies(t: Trace, facts: Facts) -> Hint | None:
    copies = [e for e in t.gpu_events if "HtoD" in str(e.get("name")) and "Pageable" in str(e.get("name"))]
    size = sum(int((e.get("args") or {}).get("bytes", 0)) for e in copies)
    dur = sum(float(e.get("dur", 0)) for e in copies)
    if size < MiB or dur < COPY_SHARE * t.window_us:
        return None
    return Hint(
        "host-to-device copies from pageable memory",
        f"{len(copies):,} copies of {format_bytes(size)} from pageable host memory took {format_us(dur)}, "
        f"{dur / t.window_us:.0%} of the cell",
        "pin the host memory (`DataLoader(..., pin_memory=True)` or `tensor.pin_memory()`) and copy with "
        "`.to(device, non_blocking=True)`",
    )


def _host_syncs(t: Trace, facts: Facts) -> Hint | None:
    if len(t.syncs) < MANY_SYNCS:
        return None
    sources: Counter[str] = Counter()
    for stack in t.syncs:
        inner = next((SYNC_SOURCES[op.name] for op in stack if op.name in SYNC_SOURCES), None)
        sources[
            inner or (stack[0].name if stack else "`torch.cuda.synchronize()` or another direct sync")
        ] += 1
    return Hint(
        "host syncs inside the loop",
        f"the CPU waited for the GPU {len(t.syncs):,} times: "
        + ", ".join(f"{n:,}× {src}" for src, n in sources.most_common(3)),
        "keep values on the GPU and read them rarely (accumulate `loss.detach()` and call `.item()` "
        "every N steps); avoid `print(tensor)`, `.cpu()` and `.item()` in the loop",
    )


def _unfused_attention(t: Trace, facts: Facts) -> Hint | None:
    names = Counter(op.name for op in t.ops)
    if names[MATH_ATTENTION]:
        return Hint(
            "attention on the unfused math kernel",
            f"`scaled_dot_product_attention` fell back to {MATH_ATTENTION} {names[MATH_ATTENTION]:,} times",
            "give it bf16/fp16 inputs with a head dimension that is a multiple of 8 (at most 256) and no "
            "dense float mask; `torch.nn.attention.sdpa_kernel` says why a backend refuses",
        )
    softmax = names["aten::softmax"] + names["aten::_softmax"]
    batched = names["aten::bmm"] + names["aten::baddbmm"]
    if softmax and batched >= softmax and not any(names[f] for f in FUSED_ATTENTION):
        return Hint(
            "attention written out as matmul + softmax",
            f"{softmax:,} softmax calls beside {batched:,} batched matmuls, and no fused attention kernel",
            "call `F.scaled_dot_product_attention(q, k, v)` (FlashAttention or memory-efficient kernels); "
            "`nn.MultiheadAttention` uses it when called with `need_weights=False`",
        )
    return None


def _cudnn_benchmark(t: Trace, facts: Facts) -> Hint | None:
    if facts.cudnn_benchmark or not t.busy_us:
        return None
    convs = [op for op in t.family.values() if op.name == "aten::convolution"]
    conv_us = sum(t.family_us[id(op)] for op in t.family.values() if op.name in CONV_OPS)
    if len(convs) < MANY_CONVS or conv_us < HEAVY_SHARE * t.busy_us:
        return None
    shapes = {op.shapes for op in convs}
    if t.record_shapes and len(shapes) > len(convs) // 2:
        return None  # the shapes change: autotuning each one would cost more than it saves
    fixed = f"{len(shapes)} input shapes" if t.record_shapes else "if the input shapes stay the same"
    return Hint(
        "cuDNN benchmark off for fixed-shape convolutions",
        f"{len(convs):,} convolutions took {format_us(conv_us)}, {conv_us / t.busy_us:.0%} of GPU time; "
        f"{fixed}, cuDNN can pick faster algorithms",
        "set `torch.backends.cudnn.benchmark = True` before the loop (it autotunes each new shape once)",
    )


RULES: tuple[Callable[[Trace, Facts], Hint | None], ...] = (
    _idle_input_pipeline,
    _launch_bound_hint,
    _fp32_tensor_cores,
    _odd_shapes,
    _pageable_copies,
    _host_syncs,
    _unfused_attention,
    _cudnn_benchmark,
)


def hints(t: Trace, facts: Facts) -> list[Hint]:
    """Every rule that fires, in the order above."""
    return [h for rule in RULES if (h := rule(t, facts)) is not None]
