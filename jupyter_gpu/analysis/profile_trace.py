"""A ``torch.profiler`` Chrome trace sorted into what the profile's tables and rules read.

The cell's window (its code on the CPU, then the GPU draining its queue), the operators of each
thread nested as they ran, the GPU time of every kernel charged to the operators around its
launch, the host syncs, and the memory events. Times are in microseconds, as in the trace.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
DTYPE_NAMES = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}


@dataclass
class TraceOp:
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

    @property
    def shapes(self) -> str | None:
        """The input shapes as the trace recorded them (with ``--record-shapes``)."""
        if not self.dims:
            return None
        return ", ".join(str(d) for d in self.dims if d not in ([], None)) or None

    @property
    def tensor_type(self) -> str | None:
        """The dtype of its first tensor input, as the trace names it (``c10::BFloat16``)."""
        return next((t for t in self.types or [] if t in DTYPE_NAMES), None)


def _intervals_union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def trace_devices(trace: Mapping[str, Any]) -> set[int]:
    """torch's indices of the GPUs whose kernels, copies and memsets the trace holds."""
    devices = set()
    for e in trace.get("traceEvents", []):
        if isinstance(e, dict) and e.get("cat") in GPU_CATEGORIES:
            device = (e.get("args") or {}).get("device")
            if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
                devices.add(device)
    return devices


class Trace:
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
        self.profile_memory = bool(trace.get("profile_memory"))
        self.ops: list[TraceOp] = []
        self.syncs: list[list[TraceOp]] = []  # the enclosing operators of each host sync, outermost first
        self.allocations: list[tuple[dict[str, Any], list[TraceOp]]] = []
        self.memory: list[dict[str, Any]] = []
        launches: dict[Any, list[TraceOp]] = {}  # correlation id -> operators around the launch
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
            stack: list[TraceOp] = []
            for e in thread:
                ts = float(e["ts"])
                while stack and stack[-1].start + stack[-1].dur <= ts:
                    stack.pop()
                args = e.get("args") or {}
                cat = e.get("cat")
                inside = self.start <= ts <= self.end
                if cat in OP_CATEGORIES:
                    op = TraceOp(
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
        self.family_us: dict[int, float] = defaultdict(float)  # id(TraceOp) -> device µs
        self.family: dict[int, TraceOp] = {}
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

    @functools.cached_property
    def busy_us(self) -> float:
        """How long the GPU ran anything within the window (overlapping streams counted once)."""
        return sum(end - start for start, end in self.busy())

    @property
    def busy_share(self) -> float:
        return self.busy_us / self.window_us if self.window_us else 0.0

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
