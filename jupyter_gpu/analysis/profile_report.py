"""A profile as the package's one ``Report``: the cell's summary, the operator and kernel
tables, memory, hints, and where the trace went."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..report import Report, Row, Section
from .profile_activity import activity_line, too_short
from .units import format_bytes, format_us

if TYPE_CHECKING:
    from .profile import Profile


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
    if p.activity is not None:
        for gpu in p.activity.gpus:
            summary.add(f"cuda:{gpu.device} activity", "", activity_line(gpu, p.activity.interval))
        if not p.activity.gpus:
            summary.add("SM and tensor-core activity", "", too_short(p.activity))
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
