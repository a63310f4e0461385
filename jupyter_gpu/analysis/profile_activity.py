"""What the GPUs really did while a profiled cell ran: the Jupyter server's samples of GPU
performance monitoring (GPM) over the cell's window, and the hint they support.

NVML's utilisation is the share of time *any* kernel ran, so a loop of tiny kernels reads 100%;
GPM's SM activity says how much of the GPU those kernels used. The server samples every
``interval`` seconds and each sample at time ``t`` averages ``(t - interval, t]``. Only samples
whose whole span lies inside the cell count: one straddling the cell's start or end mixes in what
ran before or after it (an idle GPU, another notebook's work), and reads as a figure of the cell
that it is not. So a cell shorter than about two intervals gets no figures, and says so.

Pure functions of the telemetry reply's samples (``api/gpu/telemetry``), checked like any input:
a reply from an older server (no GPM fields), a GPU without GPM (its reason in ``unsupported``)
or a GPU's first sample (null) is no figure, never an error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .profile_hints import LAUNCH_BOUND, Hint

# The tensor pipes as NVML splits them (the telemetry schema's fields), in the order shown.
TENSOR_PIPES = (
    ("HMMA", "tensor_hmma_active_percent"),  # fp16, bf16, tf32
    ("IMMA", "tensor_imma_active_percent"),  # int8
    ("DFMA", "tensor_dfma_active_percent"),  # fp64
)
# The hint's thresholds: NVML says the GPU is busy, GPM that its SMs mostly are not. A clean
# bf16 matmul loop reads ~97% SM active on the H200, a CUDA graph of tiny adds 0.3%.
BUSY_UTILISATION = 80.0
IDLE_SM = 20.0


@dataclass(frozen=True)
class GpuActivity:
    """One GPU's averages over the samples that lie inside the cell (percent)."""

    device: int  # torch's index: cuda:<device>
    uuid: str
    samples: int
    utilisation_percent: float | None  # NVML's: the share of time any kernel ran
    sm_active_percent: float
    sm_occupancy_percent: float | None
    tensor_active_percent: float | None
    tensor_pipes: dict[str, float]  # "HMMA", "IMMA", "DFMA" -> percent, where the server gave them


@dataclass(frozen=True)
class CellActivity:
    """The server's GPM figures for the GPUs a cell used; ``gpus`` is empty when the cell was too
    short for a whole sample."""

    interval: float  # seconds each sample covers
    window: float  # the cell's wall time, seconds
    gpus: tuple[GpuActivity, ...]


def _number(value: Any) -> float | None:
    """A finite number from the reply, else None (bools are not figures)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _mean(values: Iterable[Any]) -> float | None:
    figures = [n for n in map(_number, values) if n is not None]
    return sum(figures) / len(figures) if figures else None


def _readings(samples: Sequence[Any], uuid: str) -> list[tuple[float, Mapping[str, Any]]]:
    """(time, the GPU's entry) of each sample that has the GPU in state ok.

    A MIG device matches nothing: torch spells its UUID ``GPU-…``, the server ``MIG-…``, and GPM
    is read on the whole GPU only, whose figures would count the other instances' work too."""
    want = uuid.lower()
    found = []
    for sample in samples:
        t = _number(sample.get("t")) if isinstance(sample, Mapping) else None
        gpus = sample.get("gpus") if isinstance(sample, Mapping) else None
        if t is None or not isinstance(gpus, list):
            continue
        for gpu in gpus:
            if (
                isinstance(gpu, Mapping)
                and gpu.get("state") == "ok"
                and isinstance(gpu.get("uuid"), str)
                and gpu["uuid"].lower() == want
            ):
                found.append((t, gpu))
    return found


def has_gpm(samples: Sequence[Any], uuid: str) -> bool:
    """Whether the server reads GPM on this GPU: the field is in its samples (older servers leave
    it out) and not given up with a reason (a GPU without GPM, a MIG device)."""
    for _, gpu in _readings(samples, uuid):
        unsupported = gpu.get("unsupported")
        if "sm_active_percent" in gpu and not (
            isinstance(unsupported, Mapping) and "sm_active_percent" in unsupported
        ):
            return True
    return False


def gpu_activity(
    samples: Sequence[Any], interval: float, start: float, end: float, device: int, uuid: str
) -> GpuActivity | None:
    """One GPU's figures over the samples whose span ``(t - interval, t]`` lies in ``[start,
    end]`` (unix seconds) and that have them; None where no sample does."""
    inside = [
        gpu
        for t, gpu in _readings(samples, uuid)
        if start <= t - interval and t <= end and _number(gpu.get("sm_active_percent")) is not None
    ]
    sm_active = _mean(gpu["sm_active_percent"] for gpu in inside)
    if sm_active is None:
        return None
    pipes = {
        name: mean
        for name, field in TENSOR_PIPES
        if (mean := _mean(gpu.get(field) for gpu in inside)) is not None
    }
    return GpuActivity(
        device=device,
        uuid=uuid,
        samples=len(inside),
        utilisation_percent=_mean(gpu.get("utilization_gpu_percent") for gpu in inside),
        sm_active_percent=sm_active,
        sm_occupancy_percent=_mean(gpu.get("sm_occupancy_percent") for gpu in inside),
        tensor_active_percent=_mean(gpu.get("tensor_active_percent") for gpu in inside),
        tensor_pipes=pipes,
    )


def cell_activity(
    reply: Mapping[str, Any], start: float, end: float, devices: Mapping[int, str]
) -> CellActivity | None:
    """The figures of the cell's GPUs (``devices``: torch's index -> NVML UUID) over its window
    ``[start, end]`` (unix seconds), from a telemetry reply; None when the server has GPM figures
    for none of them (no GPM, an older server, a reply that is not one)."""
    interval = _number(reply.get("interval"))
    history = reply.get("history")
    if interval is None or interval <= 0 or not isinstance(history, list):
        return None
    # The latest sample says whether the server reads GPM even when no sample is newer than the
    # cell's start (a short cell).
    seen = [*history, reply.get("latest")]
    with_gpm = {device: uuid for device, uuid in sorted(devices.items()) if has_gpm(seen, uuid)}
    if not with_gpm:
        return None
    found = (gpu_activity(history, interval, start, end, d, uuid) for d, uuid in with_gpm.items())
    return CellActivity(
        interval=interval, window=max(0.0, end - start), gpus=tuple(gpu for gpu in found if gpu is not None)
    )


def _percent(x: float) -> str:
    """One decimal below 10% (idle SMs read 0.3%, not 0%), none above."""
    return f"{x:.1f}%" if x < 9.95 else f"{x:.0f}%"


def _figures(gpu: GpuActivity) -> str:
    """E.g. utilisation 99%, SM active 0.3% (occupancy 1.2%), tensor cores 0.0% (HMMA 0.0%)."""
    parts = [] if gpu.utilisation_percent is None else [f"utilisation {_percent(gpu.utilisation_percent)}"]
    occupancy = (
        "" if gpu.sm_occupancy_percent is None else f" (occupancy {_percent(gpu.sm_occupancy_percent)})"
    )
    parts.append(f"SM active {_percent(gpu.sm_active_percent)}{occupancy}")
    if gpu.tensor_active_percent is not None:
        # HMMA always (the pipe a bf16 model should use), the others where they ran
        pipes = ", ".join(
            f"{name} {_percent(p)}" for name, p in gpu.tensor_pipes.items() if p or name == "HMMA"
        )
        parts.append(f"tensor cores {_percent(gpu.tensor_active_percent)}" + (f" ({pipes})" if pipes else ""))
    return ", ".join(parts)


def _samples(gpu: GpuActivity, interval: float) -> str:
    return f"the server's samples of the whole GPU, {gpu.samples} × {interval:g} s"


def activity_line(gpu: GpuActivity, interval: float) -> str:
    """What one GPU did while the cell ran, as the report shows it."""
    return f"while the cell ran ({_samples(gpu, interval)}): {_figures(gpu)}"


def too_short(activity: CellActivity) -> str:
    """Why a cell has no figures though the server has them: one line instead of a number that
    would be mostly another time's."""
    return (
        f"none for a cell of {activity.window:.1f} s: the server samples every {activity.interval:g} s "
        f"and a sample counts only if the cell ran all of it (about {2 * activity.interval:g} s or more)"
    )


def _starved(gpu: GpuActivity) -> bool:
    return (
        gpu.utilisation_percent is not None
        and gpu.utilisation_percent >= BUSY_UTILISATION
        and gpu.sm_active_percent < IDLE_SM
    )


def _evidence(activity: CellActivity) -> str | None:
    starved = [gpu for gpu in activity.gpus if _starved(gpu)]
    if not starved:
        return None
    return "; ".join(
        f"cuda:{gpu.device}: NVML's utilisation {_percent(gpu.utilisation_percent or 0.0)} but SM "
        f"active {_percent(gpu.sm_active_percent)} ({_samples(gpu, activity.interval)})"
        for gpu in starved
    )


def activity_hints(hints: Sequence[Hint], activity: CellActivity | None) -> list[Hint]:
    """The trace's hints, with what the server's samples add: a GPU busy by NVML's utilisation
    whose SMs are mostly idle is running kernels too small to fill it.

    Where the trace already found a launch-bound loop, that is the same problem seen from the
    other side (kernels too small for the GPU, so the CPU's launches cannot keep up), and the
    trace's hint says more (how many kernels, how long each): the server's figures join its
    evidence rather than make a second hint that says the same thing.
    """
    evidence = _evidence(activity) if activity is not None else None
    if evidence is None:
        return list(hints)
    if any(hint.title == LAUNCH_BOUND for hint in hints):
        return [
            dataclasses.replace(hint, evidence=f"{hint.evidence}; {evidence}")
            if hint.title == LAUNCH_BOUND
            else hint
            for hint in hints
        ]
    return [
        *hints,
        Hint(
            "busy by NVML's utilisation, but the SMs are mostly idle",
            f"{evidence}: kernels ran nearly all the time, yet each kept few of the GPU's SMs busy "
            "(a launch-bound or single-stream loop of small kernels)",
            "give each kernel more work: larger batches, fewer and larger operations "
            "(`torch.compile(model)` fuses small ones; CUDA graphs cut the gaps between launches), "
            "or run independent work on several CUDA streams",
        ),
    ]
