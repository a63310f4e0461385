"""What a ``torch.profiler`` trace says about a cell: pure functions over its Chrome trace.

``%%gpu_profile`` exports the profile as a Chrome trace (the JSON that Perfetto and
``chrome://tracing`` open) and reads it back through :func:`analyse`, so the same code reads a
live profile, a trace saved last week and the synthetic events of the tests. Each hint is a rule
over those events with its evidence and a fix; none needs a GPU to be tested.

Times are in microseconds, as in the trace.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..report import Report, Reportable, Row, Section
from .units import MiB, format_bytes

CELL_MARK = "jupyter_gpu: the profiled cell"  # the record_function around the cell's code
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
OP_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuCtxSynchronize",
    }
)
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward"})
FUSED_ATTENTION = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
)
MATH_ATTENTION = "aten::_scaled_dot_product_attention_math"
HALF_TYPES = frozenset({"c10::BFloat16", "c10::Half"})
DTYPE_NAMES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}
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


@dataclass(frozen=True)
class Facts:
    """Settings the trace does not record, read by the magic when the cell ends."""

    tf32_matmul: bool = False  # torch.backends.cuda.matmul.allow_tf32
    tf32_cudnn: bool = True  # torch.backends.cudnn.allow_tf32 (torch's default)
    cudnn_benchmark: bool = False


@dataclass
class _Op:
    """One operator or annotation call, with what ran inside it."""

    name: str
    tid: Any
    start: float
    dur: float
    types: list[str] | None
    dims: list[Any] | None
    outermost: bool
    device_us: float = 0.0
    alloc_bytes: int = 0


@dataclass(frozen=True)
class OpStat:
    name: str
    shapes: str | None
    calls: int
    cpu_us: float
    device_us: float
    alloc_bytes: int


@dataclass(frozen=True)
class KernelStat:
    name: str
    calls: int
    device_us: float

    @property
    def mean_us(self) -> float:
        return self.device_us / self.calls


@dataclass(frozen=True)
class Gap:
    offset_us: float  # from the start of the cell
    dur_us: float
    during: str  # what the CPU was doing meanwhile


@dataclass(frozen=True)
class Allocation:
    device: str
    bytes: int
    op: str


@dataclass(frozen=True)
class Hint:
    title: str
    evidence: str
    fix: str


@dataclass(repr=False)
class Profile(Reportable):
    """The answer for one cell; prints and displays as a report."""

    window_us: float
    gpu: str | None  # the GPU's name, None when the trace holds no GPU activity
    busy_us: float
    gaps: list[Gap]
    ops: list[OpStat]
    kernels: list[KernelStat]
    sort: str
    peaks: dict[str, int] | None  # per device, with --memory
    allocations: list[Allocation]
    hints: list[Hint]
    notes: list[str] = field(default_factory=list)
    wall_us: float | None = None
    trace_path: str | None = None
    trace_error: str | None = None
    top: int = 10

    @property
    def busy_share(self) -> float:
        return self.busy_us / self.window_us if self.window_us else 0.0

    def as_report(self) -> Report:
        return render(self)


def format_us(us: float) -> str:
    """A duration in µs, ms or s with three significant figures: "3.20 µs", "41.0 ms"."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(us) >= scale:
            return f"{_figures(us / scale)} {unit}"
    return f"{_figures(us)} µs"


def _figures(x: float) -> str:
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 100 else f"{x:,.0f}"


def _intervals_union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _shapes(op: _Op) -> str | None:
    if not op.dims:
        return None
    return ", ".join(str(d) for d in op.dims if d not in ([], None)) or None


def _first_tensor_type(op: _Op) -> str | None:
    return next((t for t in op.types or [] if t in DTYPE_NAMES), None)


class _Trace:
    """The trace's events sorted into operators, GPU activities and their links."""

    def __init__(self, trace: Mapping[str, Any]) -> None:
        events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
        durations = [e for e in events if e.get("ph") == "X" and "ts" in e]
        mark = next((e for e in durations if e.get("name") == CELL_MARK), None)
        self.gpu_events = [e for e in durations if e.get("cat") in GPU_CATEGORIES]
        # The cell's window: its code on the CPU (``cpu_end``), then the GPU draining its queue.
        if mark is not None:
            self.start = float(mark["ts"])
            self.cpu_end = self.start + float(mark.get("dur", 0))
        else:  # a trace recorded without the magic: all of it
            self.start = min((float(e["ts"]) for e in durations), default=0.0)
            self.cpu_end = max((float(e["ts"]) + float(e.get("dur", 0)) for e in durations), default=0.0)
        self.end = max([self.cpu_end] + [float(e["ts"]) + float(e.get("dur", 0)) for e in self.gpu_events])
        self.devices = trace.get("deviceProperties") or []
        self.record_shapes = bool(trace.get("record_shapes"))
        self.ops: list[_Op] = []
        self.syncs: list[list[_Op]] = []  # the enclosing operators of each host sync, outermost first
        self.allocations: list[tuple[dict[str, Any], list[_Op]]] = []
        self.memory: list[dict[str, Any]] = []
        launches: dict[Any, list[_Op]] = {}  # correlation id -> operators around the launch
        by_thread: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for e in events:
            cat = e.get("cat")
            in_op = cat in OP_CATEGORIES and e.get("ph") == "X" and e is not mark
            if (
                in_op
                or cat in RUNTIME_CATEGORIES
                or (cat == "cpu_instant_event" and e.get("name") == "[memory]")
            ):
                by_thread[e.get("tid")].append(e)
        for tid, thread in by_thread.items():
            thread.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
            stack: list[_Op] = []
            for e in thread:
                ts = float(e["ts"])
                while stack and stack[-1].start + stack[-1].dur <= ts:
                    stack.pop()
                args = e.get("args") or {}
                cat = e.get("cat")
                inside = self.start <= ts <= self.end
                if cat in OP_CATEGORIES:
                    op = _Op(
                        e.get("name", "?"),
                        tid,
                        ts,
                        float(e.get("dur", 0)),
                        args.get("Input type"),
                        args.get("Input Dims"),
                        not stack,
                    )
                    stack.append(op)
                    if inside:
                        self.ops.append(op)
                elif cat in RUNTIME_CATEGORIES:
                    if "correlation" in args:
                        launches[args["correlation"]] = list(stack)
                    if e.get("name") in SYNC_CALLS and self.start <= ts <= self.cpu_end:
                        self.syncs.append(list(stack))
                elif inside:  # a memory event
                    self.memory.append(args)
                    if int(args.get("Bytes", 0)) > 0:
                        self.allocations.append((args, list(stack)))
                        for op in stack:
                            op.alloc_bytes += int(args["Bytes"])
        # GPU time of each kernel, charged to every operator around its launch, and to the
        # innermost matmul/conv among them (autocast nests an fp32 call around the bf16 one).
        self.family_us: dict[int, float] = defaultdict(float)  # id(_Op) -> device µs
        self.family: dict[int, _Op] = {}
        for e in self.gpu_events:
            around = launches.get((e.get("args") or {}).get("correlation"), [])
            dur = float(e.get("dur", 0))
            for op in around:
                op.device_us += dur
            heavy = next((op for op in reversed(around) if op.name in MATMUL_OPS | CONV_OPS), None)
            if heavy is not None:
                self.family_us[id(heavy)] += dur
                self.family[id(heavy)] = heavy

    @property
    def window_us(self) -> float:
        return max(self.end - self.start, 0.0)

    def gpu_name(self) -> str | None:
        if not self.gpu_events:
            return None
        names = sorted({str(d.get("name", "GPU")) for d in self.devices})
        return ", ".join(names) or "GPU"

    def compute_major(self) -> int:
        return max((int(d.get("computeMajor", 0)) for d in self.devices), default=0)

    def busy(self) -> list[tuple[float, float]]:
        spans = (
            (max(float(e["ts"]), self.start), min(float(e["ts"]) + float(e.get("dur", 0)), self.end))
            for e in self.gpu_events
        )
        return _intervals_union((s, t) for s, t in spans if t > s)

    def idle(self) -> list[tuple[float, float]]:
        idle, cursor = [], self.start
        for start, end in self.busy():
            if start > cursor:
                idle.append((cursor, start))
            cursor = max(cursor, end)
        if self.end > cursor:
            idle.append((cursor, self.end))
        return idle

    def cpu_during(self, start: float, end: float) -> dict[str, float]:
        """How long each outermost operator overlapped [start, end], longest first."""
        overlap: dict[str, float] = defaultdict(float)
        for op in self.ops:
            if op.outermost:
                shared = min(op.start + op.dur, end) - max(op.start, start)
                if shared > 0:
                    overlap[op.name] += shared
        return dict(sorted(overlap.items(), key=lambda kv: -kv[1]))


def analyse(
    trace: Mapping[str, Any],
    facts: Facts = Facts(),
    sort: str | None = None,
    top: int = 10,
) -> Profile:
    """Read a Chrome trace exported by ``torch.profiler`` into tables and hints.

    ``sort`` is ``device``, ``cpu`` or ``memory`` (default: device time where the GPU ran
    anything, CPU time otherwise).
    """
    t = _Trace(trace)
    gpu = t.gpu_name()
    sort = sort or ("device" if gpu else "cpu")
    busy_us = sum(end - start for start, end in t.busy())
    gaps = []
    if gpu:
        for start, end in sorted(t.idle(), key=lambda s: s[0] - s[1])[:3]:
            during = list(t.cpu_during(start, end))
            gaps.append(
                Gap(start - t.start, end - start, during[0] if during else "Python code, no torch operator")
            )
    peaks: dict[str, int] | None = None
    if trace.get("profile_memory"):
        peaks = {}
        for args in t.memory:
            device = _device(args)
            peaks[device] = max(peaks.get(device, 0), int(args.get("Total Allocated", 0)))
    allocations = sorted(
        (
            Allocation(_device(args), int(args["Bytes"]), stack[-1].name if stack else "outside any operator")
            for args, stack in t.allocations
        ),
        key=lambda a: -a.bytes,
    )[:top]
    profile = Profile(
        window_us=t.window_us,
        gpu=gpu,
        busy_us=busy_us,
        gaps=gaps,
        ops=_op_table(t, sort)[:top],
        kernels=_kernel_table(t)[:top],
        sort=sort,
        peaks=peaks,
        allocations=allocations,
        hints=[],
        top=top,
    )
    if gpu:
        profile.hints = [h for rule in RULES if (h := rule(t, profile, facts)) is not None]
        if not t.record_shapes and any(op.name in MATMUL_OPS | CONV_OPS for op in t.ops):
            profile.notes.append(
                "the Tensor Core checks (matmul and conv dtypes, shapes) need `--record-shapes`"
            )
    else:
        profile.notes.append(
            "no GPU activity in this trace: CPU operators only (GPU busy time, kernels and hints need CUDA)"
        )
    return profile


def _device(args: Mapping[str, Any]) -> str:
    return f"cuda:{args.get('Device Id', 0)}" if args.get("Device Type") == 1 else "CPU"


def _op_table(t: _Trace, sort: str) -> list[OpStat]:
    groups: dict[tuple[str, str | None], list[_Op]] = defaultdict(list)
    for op in t.ops:
        groups[(op.name, _shapes(op) if t.record_shapes else None)].append(op)
    stats = [
        OpStat(
            name,
            shapes,
            len(ops),
            sum(o.dur for o in ops),
            sum(o.device_us for o in ops),
            sum(o.alloc_bytes for o in ops),
        )
        for (name, shapes), ops in groups.items()
    ]
    key: dict[str, Callable[[OpStat], tuple[float, float]]] = {
        "device": lambda s: (s.device_us, s.cpu_us),
        "cpu": lambda s: (s.cpu_us, s.device_us),
        "memory": lambda s: (s.alloc_bytes, s.cpu_us),
    }
    return sorted(stats, key=key[sort], reverse=True)


def _kernel_table(t: _Trace) -> list[KernelStat]:
    calls: Counter[str] = Counter()
    total: dict[str, float] = defaultdict(float)
    for e in t.gpu_events:
        name = str(e.get("name", "?"))
        calls[name] += 1
        total[name] += float(e.get("dur", 0))
    return sorted((KernelStat(n, calls[n], total[n]) for n in calls), key=lambda k: -k.device_us)


# -- hints: each a rule over the trace, returning None when it does not apply -----------------------


def _idle_input_pipeline(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
    if t.window_us < MIN_WINDOW_US or 1 - p.busy_share < IDLE_SHARE or _launch_bound(t, p):
        return None
    during: dict[str, float] = defaultdict(float)
    for start, end in t.idle():
        for name, us in t.cpu_during(start, end).items():
            during[name] += us
    idle_us = t.window_us - p.busy_us
    loader = sum(us for name, us in during.items() if "DataLoader" in name)
    where = (
        f"{format_us(loader)} of it in the DataLoader fetching batches"
        if loader >= 0.3 * idle_us
        else "meanwhile the CPU ran "
        + (", ".join(sorted(during, key=lambda n: -during[n])[:2]) or "Python code")
    )
    return Hint(
        "GPU idle most of the time while the CPU works: input pipeline",
        f"the GPU was idle {1 - p.busy_share:.0%} of {format_us(t.window_us)}; {where}",
        "prepare batches in parallel: `DataLoader(..., num_workers=4, pin_memory=True, "
        "persistent_workers=True)`; move preprocessing onto the GPU or out of the loop",
    )


def _launch_bound(t: _Trace, p: Profile) -> bool:
    kernels = [float(e.get("dur", 0)) for e in t.gpu_events if e.get("cat") == "kernel"]
    return (
        len(kernels) >= MANY_KERNELS
        and statistics.median(kernels) < TINY_KERNEL_US
        and 1 - p.busy_share >= IDLE_SHARE
    )


def _launch_bound_hint(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
    if not _launch_bound(t, p):
        return None
    kernels = [float(e.get("dur", 0)) for e in t.gpu_events if e.get("cat") == "kernel"]
    return Hint(
        "many tiny kernels: launch-bound",
        f"{len(kernels):,} kernels, median {format_us(statistics.median(kernels))} each; the GPU was busy "
        f"only {p.busy_share:.0%} of the time: the CPU launches kernels more slowly than the GPU runs them",
        "fuse the small operations with `torch.compile(model)`, or replay the step as a CUDA graph "
        '(`torch.compile(model, mode="reduce-overhead")` or `torch.cuda.graphs`); larger batches help too',
    )


def _fp32_tensor_cores(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
    if t.compute_major() < 7 or not p.busy_us:
        return None
    fp32: dict[str, float] = defaultdict(float)
    for key, op in t.family.items():
        tf32 = facts.tf32_matmul if op.name in MATMUL_OPS else facts.tf32_cudnn
        if _first_tensor_type(op) == "float" and not (tf32 and t.compute_major() >= 8):
            fp32[op.name] += t.family_us[key]
    total = sum(fp32.values())
    if total < HEAVY_SHARE * p.busy_us:
        return None
    names = ", ".join(n for n, _ in sorted(fp32.items(), key=lambda kv: -kv[1]))
    tf32_fix = ' or `torch.set_float32_matmul_precision("high")` (TF32)' if t.compute_major() >= 8 else ""
    return Hint(
        "fp32 matmuls and convolutions: Tensor Cores unused",
        f"{names} in fp32 took {format_us(total)}, {total / p.busy_us:.0%} of GPU time",
        f"run the cell under `%%amp` (bf16 autocast){tf32_fix}",
    )


def _odd_shapes(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
    if not p.busy_us:
        return None
    found: dict[str, float] = defaultdict(float)
    for key, op in t.family.items():
        if op.name not in MATMUL_OPS or _first_tensor_type(op) not in HALF_TYPES:
            continue
        matrices = [d for d in op.dims or [] if isinstance(d, list) and len(d) >= 2]
        odd = sorted({n for m in matrices[-2:] for n in m[-2:] if isinstance(n, int) and n % 8})
        if odd:
            shapes = " × ".join(str(m) for m in matrices[-2:])
            found[f"{op.name} {shapes} ({', '.join(map(str, odd))})"] += t.family_us[key]
    worst = [
        (k, us) for k, us in sorted(found.items(), key=lambda kv: -kv[1]) if us >= SHAPE_SHARE * p.busy_us
    ]
    if not worst:
        return None
    evidence = "; ".join(f"{k}: {us / p.busy_us:.0%} of GPU time" for k, us in worst[:3])
    return Hint(
        "matmul dimensions not multiples of 8: Tensor Cores run them slowly",
        f"{evidence} (the dimensions in brackets are not multiples of 8)",
        "pad those dimensions (hidden size, vocabulary, batch) to multiples of 8, better 64",
    )


def _pageable_copies(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
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


def _host_syncs(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
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


def _unfused_attention(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
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


def _cudnn_benchmark(t: _Trace, p: Profile, facts: Facts) -> Hint | None:
    if facts.cudnn_benchmark or not p.busy_us:
        return None
    convs = [op for op in t.family.values() if op.name == "aten::convolution"]
    conv_us = sum(t.family_us[id(op)] for op in t.family.values() if op.name in CONV_OPS)
    if len(convs) < MANY_CONVS or conv_us < HEAVY_SHARE * p.busy_us:
        return None
    shapes = {_shapes(op) for op in convs}
    if t.record_shapes and len(shapes) > len(convs) // 2:
        return None  # the shapes change: autotuning each one would cost more than it saves
    fixed = f"{len(shapes)} input shapes" if t.record_shapes else "if the input shapes stay the same"
    return Hint(
        "cuDNN benchmark off for fixed-shape convolutions",
        f"{len(convs):,} convolutions took {format_us(conv_us)}, {conv_us / p.busy_us:.0%} of GPU time; "
        f"{fixed}, cuDNN can pick faster algorithms",
        "set `torch.backends.cudnn.benchmark = True` before the loop (it autotunes each new shape once)",
    )


RULES: tuple[Callable[[_Trace, Profile, Facts], Hint | None], ...] = (
    _idle_input_pipeline,
    _launch_bound_hint,
    _fp32_tensor_cores,
    _odd_shapes,
    _pageable_copies,
    _host_syncs,
    _unfused_attention,
    _cudnn_benchmark,
)


# -- the report ------------------------------------------------------------------------------------


def _short(name: str, width: int = 72) -> str:
    """A kernel's name without its template arguments and parameter list, as people read it."""
    short = name.removeprefix("void ")
    for opening in "<(":
        cut = short.find(opening)
        if cut > 0:
            short = short[:cut]
    return short if len(short) <= width else short[: width - 1] + "…"


def _calls(n: int) -> str:
    return f"{n:,} call{'s' if n != 1 else ''}"


def render(p: Profile) -> Report:
    """The profile as the package's one report: summary, tables, hints, where the trace went."""
    summary = Section("cell")
    if p.wall_us is not None:
        summary.add("wall time", format_us(p.wall_us))
    if p.gpu:
        summary.add(
            "GPU busy",
            f"{p.busy_share:.0%}",
            f"{format_us(p.busy_us)} of {format_us(p.window_us)} on {p.gpu}",
        )
        for gap in p.gaps:
            summary.add(
                "idle gap", format_us(gap.dur_us), f"at +{format_us(gap.offset_us)}, during {gap.during}"
            )
    sections = [summary] if summary.rows else []
    if p.ops:
        by = {"device": "device time", "cpu": "CPU time", "memory": "memory allocated"}[p.sort]
        ops = Section(f"top operators by {by}")
        for s in p.ops:
            figures = [_calls(s.calls)] + ([f"CPU {format_us(s.cpu_us)}"] if p.sort != "cpu" else [])
            if p.gpu:
                figures.append(f"GPU mean {format_us(s.device_us / s.calls)}")
            if p.peaks is not None and p.sort != "memory":
                figures.append(f"allocated {format_bytes(s.alloc_bytes)}")
            value = {
                "device": format_us(s.device_us),
                "cpu": format_us(s.cpu_us),
                "memory": format_bytes(s.alloc_bytes),
            }
            ops.add(
                f"{s.name} {s.shapes}" if s.shapes else _short(s.name, 60), value[p.sort], ", ".join(figures)
            )
        sections.append(ops)
    if p.kernels:
        kernels = Section("top GPU kernels by device time")
        for k in p.kernels:
            kernels.add(
                _short(k.name), format_us(k.device_us), f"{_calls(k.calls)}, mean {format_us(k.mean_us)}"
            )
        sections.append(kernels)
    if p.peaks is not None:
        memory = Section("memory")
        memory.rows += [
            Row(f"peak allocated on {d}", format_bytes(b), strong=True) for d, b in sorted(p.peaks.items())
        ]
        for a in p.allocations:
            memory.add(f"allocation in {_short(a.op, 60)}", format_bytes(a.bytes), f"on {a.device}")
        sections.append(memory)
    if p.hints:
        sections.append(
            Section("hints", [Row(h.title, status="warn", note=h.evidence, fix=h.fix) for h in p.hints])
        )
    elif p.gpu:
        sections.append(
            Section("hints", [Row("no problem found", status="ok", note="none of the checks fired")])
        )
    notes = list(p.notes)
    if p.trace_error:
        notes.append(f"could not save the trace: {p.trace_error}; pass `--trace PATH` to a writable place")
    elif p.trace_path:
        notes.append(
            f"trace saved to {p.trace_path}: open it in `chrome://tracing` or https://ui.perfetto.dev "
            "(both read the file on your machine, offline)"
        )
    heading = "gpu_profile: " + (
        f"GPU busy {p.busy_share:.0%}, {len(p.hints)} hint{'s' if len(p.hints) != 1 else ''}"
        if p.gpu
        else "CPU only"
    )
    return Report(
        sections,
        heading=heading,
        status="warn" if p.hints else None,
        notes=notes,
        css_class="jupyter-gpu-profile",
    )
