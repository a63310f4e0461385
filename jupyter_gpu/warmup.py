"""The warm-up: pay CUDA's one-time start-up costs before the first real step.

The steps (``warmup_steps.py``) warm the families of kernels a ``warmup_choice.Choice`` names:
what the notebook uses, or everything. A warm-up moves those costs to a moment the user picks (or
to a background thread while the user reads): it does not remove them, and it cannot know every
shape of a particular model, which is what ``%%gpu_warmup``'s cell form (run the user's own step
once) is for. It never sets ``CUDA_MODULE_LOADING=EAGER``: that makes the context three times
larger.

Plain library code (no IPython): ``%gpu_warmup`` (``kernel/warmup_magic.py``) and
``jupyter gpu warmup`` both run these steps.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import warmup_steps
from .analysis.units import format_bytes
from .report import Report, Reportable, Row
from .report import Section as ReportSection
from .warmup_choice import Choice

# Warmth belongs to the process (CUDA state is per process), not to one extension load.
_first_warmup_ms: dict[int, float] = {}
_FORK_LAUNCHERS = {
    "accelerate": "accelerate's notebook_launcher",
    "lightning": "Lightning's ddp_notebook",
    "pytorch_lightning": "Lightning's ddp_notebook",
    "ignite": "ignite's Parallel",
}


class Pacer(Protocol):
    """Asked before each step whether to run it (it may wait first: a background warm-up waits
    while a cell runs) and told when it ends."""

    def before(self, step: str) -> bool: ...

    def settle(self, restore: Callable[[], None]) -> None:
        """Put the notebook's random number generators back with ``restore``, unless a cell runs
        beside the step (its seeds are then its own)."""

    def after(self, step: Step) -> None: ...


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


def _process_memory(torch: Any, index: int) -> int | None:
    """This process's memory on the GPU as NVML counts it (context included), if NVML can say."""
    from .nvml.holders import device_view
    from .torch_state import nvml_uuid

    uuid = nvml_uuid(torch, index)
    view, _ = device_view(uuid) if uuid else (None, None)
    return view.this_kernel_bytes if view else None


def warm_device(
    torch: Any,
    index: int,
    choice: Choice | None = None,
    nccl: bool = False,
    compile: bool = False,
    pacer: Pacer | None = None,
    optimizers: bool = True,
) -> Section:
    """Run the chosen steps (all without a choice; the optimizers' only if ``optimizers``) on one
    device, timing each (synchronised) and carrying on past failures; a pacer that says no stops
    it between steps.

    Each step leaves the CPU's and the device's random number generators as it found them (its
    models are built on the device, from the device's generator): a warm-up between a notebook's
    ``torch.manual_seed`` and its training gives the same numbers as no warm-up (in the
    background, unless a cell ran beside a step: see ``kernel.warmup_background``)."""
    section = Section(f"cuda:{index}")
    steps = warmup_steps.steps_for(torch, index, choice or Choice.all(), nccl, compile, optimizers)
    _run_steps(torch, index, steps, section, pacer)
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


def _run_steps(
    torch: Any, index: int, steps: list[tuple[str, Any]], section: Section, pacer: Pacer | None = None
) -> None:
    """Run ``steps`` on one device into ``section``, each timed (synchronised), past failures;
    the notebook's random numbers are put back after each (through ``pacer.settle``, if any)."""
    with torch.cuda.device(index):
        for name, action in steps:
            if pacer is not None and not pacer.before(name):
                section.notes.append(f"stopped before: {name}")
                break
            start = time.perf_counter()
            error = None
            try:
                restore = functools.partial(
                    _set_rng_state, torch, index, (torch.get_rng_state(), torch.cuda.get_rng_state(index))
                )
                try:
                    action()
                    torch.cuda.synchronize(index)
                finally:
                    restore() if pacer is None else pacer.settle(restore)
            except Exception as exc:  # one library failing must not hide what the others cost
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            section.steps.append(Step(name, (time.perf_counter() - start) * 1e3, error))
            if pacer is not None:
                pacer.after(section.steps[-1])
            if error and name == "context":
                break


def _set_rng_state(torch: Any, index: int, saved: tuple[Any, Any]) -> None:
    torch.set_rng_state(saved[0])
    torch.cuda.set_rng_state(saved[1], index)


def warm_this_thread(report: WarmupReport, devices: list[int], choice: Choice | None) -> None:
    """After a warm-up on another thread: the families whose state is per thread (cuDNN's handle,
    its convolution and attention plans) again on this one, added to ``report``'s sections."""
    import torch

    for index, section in zip(devices, report.sections):
        steps = warmup_steps.family_steps(
            torch, index, choice or Choice.all(), warmup_steps.PER_THREAD_FAMILIES
        )
        labelled = [
            (f"{name}, again on the kernel's main thread (cuDNN state is per thread)", a) for name, a in steps
        ]
        _run_steps(torch, index, labelled, section)


def warm_optimizers(devices: list[int], choice: Choice, pacer: Pacer | None = None) -> WarmupReport:
    """The optimizers' and GradScaler's steps alone (``warm_up(..., optimizers=False)`` left them
    out), one device after another: what they warm (foreach kernels, Python imports) is mostly
    shared by all devices."""
    import torch

    sections = []
    for index in devices:
        section = Section(f"cuda:{index} {torch.cuda.get_device_name(index)}")
        _run_steps(torch, index, warmup_steps.optimizer_steps(torch, index, choice), section, pacer)
        sections.append(section)
    return WarmupReport(sections)


def warm_up(
    devices: list[int],
    choice: Choice | None = None,
    nccl: bool = False,
    compile: bool = False,
    pacer: Pacer | None = None,
    optimizers: bool = True,
) -> WarmupReport:
    """Warm every device, in parallel; usable without IPython (scripts, benchmarks). Without a
    choice, everything (``--all``); with one, its one-line reason leads the report's notes.
    ``optimizers=False`` leaves the optimizers' steps to ``warm_optimizers``."""
    import torch

    def warm(index: int) -> Section:
        return warm_device(torch, index, choice, nccl, compile, pacer, optimizers)

    if len(devices) > 1:  # one thread per device: kernel loading and cuDNN set-up overlap
        with ThreadPoolExecutor(len(devices), thread_name_prefix="gpu-warmup") as pool:
            sections = list(pool.map(warm, devices))
    else:
        sections = [warm(i) for i in devices]
    report = WarmupReport(sections, [choice.describe()] if choice else [])
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
