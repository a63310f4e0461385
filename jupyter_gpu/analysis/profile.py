"""What a ``torch.profiler`` trace says about a cell: pure functions over its Chrome trace.

``%%gpu_profile`` exports the profile as a Chrome trace (the JSON that Perfetto and
``chrome://tracing`` open) and reads it back through :func:`analyse`, so the same code reads a
live profile, a trace saved last week and the synthetic events of the tests. The events are
sorted in ``profile_trace``, the hints are rules in ``profile_hints``, what the Jupyter server's
samples say the GPU did meanwhile is read in ``profile_activity``, and the report is drawn in
``profile_report``.

Times are in microseconds, as in the trace.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..report import Report, Reportable
from .profile_activity import CellActivity, activity_hints
from .profile_hints import Facts, Hint, hints
from .profile_report import render
from .profile_trace import CONV_OPS, MATMUL_OPS, Trace, TraceOp


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
    activity: CellActivity | None = None  # the server's GPM samples over the cell, where it has them

    @property
    def busy_share(self) -> float:
        return self.busy_us / self.window_us if self.window_us else 0.0

    def as_report(self) -> Report:
        return render(self)


def analyse(
    trace: Mapping[str, Any],
    facts: Facts | None = None,
    sort: str | None = None,
    top: int = 10,
    activity: CellActivity | None = None,
) -> Profile:
    """Read a Chrome trace exported by ``torch.profiler`` into tables and hints.

    ``facts`` are the settings the trace does not record (default: torch's defaults); ``sort``
    is ``device``, ``cpu`` or ``memory`` (default: device time where the GPU ran anything, CPU
    time otherwise); ``activity``: what the server's samples say the GPUs did during the cell.
    """
    t = Trace(trace)
    gpu = t.gpu_name()
    sort = sort or ("device" if gpu else "cpu")
    gaps = []
    if gpu:
        for start, end in sorted(t.idle(), key=lambda s: s[0] - s[1])[:3]:
            during = list(t.cpu_during(start, end))
            gaps.append(
                Gap(start - t.start, end - start, during[0] if during else "Python code, no torch operator")
            )
    peaks: dict[str, int] | None = None
    if t.profile_memory:
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
        busy_us=t.busy_us,
        gaps=gaps,
        ops=_op_table(t, sort)[:top],
        kernels=_kernel_table(t)[:top],
        sort=sort,
        peaks=peaks,
        allocations=allocations,
        hints=[],
        top=top,
        activity=activity,
    )
    if gpu:
        profile.hints = hints(t, facts or Facts())
        if not t.record_shapes and any(op.name in MATMUL_OPS | CONV_OPS for op in t.ops):
            profile.notes.append(
                "the Tensor Core checks (matmul and conv dtypes, shapes) need `--record-shapes`"
            )
    else:
        profile.notes.append(
            "no GPU activity in this trace: CPU operators only (GPU busy time, kernels and hints need CUDA)"
        )
    # GPM's figures are the whole GPU's and need no kernel in this trace (a cell may only wait
    # for work an earlier cell queued).
    profile.hints = activity_hints(profile.hints, activity)
    return profile


def _device(args: Mapping[str, Any]) -> str:
    return f"cuda:{args.get('Device Id', 0)}" if args.get("Device Type") == 1 else "CPU"


def _op_table(t: Trace, sort: str) -> list[OpStat]:
    groups: dict[tuple[str, str | None], list[TraceOp]] = defaultdict(list)
    for op in t.ops:
        groups[(op.name, op.shapes if t.record_shapes else None)].append(op)
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


def _kernel_table(t: Trace) -> list[KernelStat]:
    calls: Counter[str] = Counter()
    total: dict[str, float] = defaultdict(float)
    for e in t.gpu_events:
        name = str(e.get("name", "?"))
        calls[name] += 1
        total[name] += float(e.get("dur", 0))
    return sorted((KernelStat(n, calls[n], total[n]) for n in calls), key=lambda k: -k.device_us)
