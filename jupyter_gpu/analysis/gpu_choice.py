"""Which GPUs a new job should use now (pure): those with the most free memory, counting what was
already promised to jobs still starting, so that eight students' kernels do not all land on GPU 0.

A GPU in MIG mode is never picked whole: its MIG devices are the candidates, each a device of its
own. CUDA shows a process one MIG device only, so a job of two devices or more gets whole GPUs.
``jupyter gpu pick`` prints the choice; the server's ``assign_gpus`` gives it to new kernels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .units import format_bytes


@dataclass(frozen=True)
class Candidate:
    index: int
    uuid: str
    name: str
    free_bytes: int
    total_bytes: int
    mig: bool = False  # a MIG device: never one of several for a job


def combinable(devices: Iterable[Candidate], count: int) -> list[Candidate]:
    """Those a job of ``count`` devices can be given: CUDA enumerates only the first MIG device of
    ``CUDA_VISIBLE_DEVICES``, so MIG devices go to jobs of one."""
    return [d for d in devices if count == 1 or not d.mig]


class NotEnough(Exception):
    """Fewer GPUs than asked for have the memory; the message says which come closest."""


def candidates(devices: Iterable[Mapping[str, Any]]) -> list[Candidate]:
    """The devices a job can be given (whole GPUs not in MIG mode, MIG devices), from NVML's
    readings (``index``, ``uuid``, ``name``, ``memory_free_bytes``, ``memory_total_bytes``,
    ``mig_mode``, ``mig``); one whose memory cannot be read is left out."""
    found = []
    for d in devices:
        whole_in_mig_mode = d.get("mig") is None and bool((d.get("mig_mode") or {}).get("current"))
        free, total = d.get("memory_free_bytes"), d.get("memory_total_bytes")
        if whole_in_mig_mode or not isinstance(free, int) or not isinstance(total, int) or not d.get("uuid"):
            continue
        mig = d.get("mig") is not None
        found.append(Candidate(int(d["index"]), str(d["uuid"]), str(d.get("name") or ""), free, total, mig))
    return found


def choose(
    devices: Iterable[Candidate],
    *,
    count: int = 1,
    memory: int = 0,
    promised: Mapping[str, int] | None = None,
    waiting: Mapping[str, int] | None = None,
) -> list[Candidate]:
    """``count`` devices with at least ``memory`` bytes free (any, for 0), most free first;
    ``promised``: bytes per UUID already given to jobs that have not allocated them yet;
    ``waiting``: how many such jobs per UUID. Ties go to fewer waiting jobs, then the lowest index."""
    promised, waiting = promised or {}, waiting or {}
    given = list(devices)
    devices = combinable(given, count)
    free = {d.uuid: d.free_bytes - promised.get(d.uuid, 0) for d in devices}
    ranked = sorted(devices, key=lambda d: (-free[d.uuid], waiting.get(d.uuid, 0), d.index))
    fitting = [d for d in ranked if memory <= 0 or free[d.uuid] >= memory]
    if len(fitting) < count:
        closest = (
            ", ".join(f"GPU {d.index} ({format_bytes(max(free[d.uuid], 0))} free)" for d in ranked[:count])
            or "none"
        )
        mig = len(given) - len(devices)
        left_out = f" ({mig} MIG device(s) left out: a process sees one MIG device only)" if mig else ""
        raise NotEnough(
            f"{len(fitting)} of {len(ranked)} GPU(s) have {format_bytes(memory)} free, {count} asked for"
            f"{left_out}; the most free: {closest}"
        )
    return fitting[:count]
