"""New kernels spread over the GPUs (``c.GPUMonitor.assign_gpus = "least_used[:N]"``): each kernel
this server starts gets ``CUDA_VISIBLE_DEVICES`` naming, by UUID, the N GPUs (or MIG devices) with
the most free memory in the latest sample, so that kernels started together do not all land on one
GPU: a kernel already sent to a GPU that holds nothing there yet counts as holding what a kernel
will (the quota when one is set, else what this server's kernels hold on average, at least 1 GiB).

The choice is ``analysis.gpu_choice``; this adapter reads the sampler and remembers assignments.
Where the server's own environment already sets ``CUDA_VISIBLE_DEVICES`` (a Slurm job, a
container given its GPUs), that is the user's word and nothing is assigned.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..analysis.gpu_choice import NotEnough, candidates, choose

MAX_REMEMBERED = 4096  # kernels whose assignment is kept (a long-lived server forgets the oldest)
MIN_PROMISE = 2**30
FIRST_SAMPLE_WAIT = 10.0  # seconds a kernel started with the server waits for NVML's first reading


def parse_assign(value: str) -> int:
    """GPUs per kernel from ``"none"`` (0), ``"least_used"`` (1) or ``"least_used:N"``; a
    ValueError names what is wrong."""
    if value == "none":
        return 0
    name, _, count = value.partition(":")
    if name != "least_used" or (count and not (count.isdigit() and int(count) >= 1)):
        raise ValueError(f"{value!r} is not 'none', 'least_used' or 'least_used:N' with N ≥ 1")
    return int(count or 1)


class GpuAssigner:
    """Picks the GPUs of each new kernel and remembers them for the kernels reply."""

    def __init__(
        self,
        count: int,
        devices: Callable[[], list[dict[str, Any]] | None],
        holding: Callable[[], dict[str, dict[str, int]]],
        alive: Callable[[], set[str]],
        log: logging.Logger,
        quota: int | None = None,
    ) -> None:
        self.count = count
        self._devices = devices  # the latest sample's devices with their free memory; None: no sample yet
        self._holding = holding  # kernel id -> {UUID: bytes} it holds, as last attributed
        self._alive = alive  # the kernel manager's kernel ids
        self.quota = quota
        self.log = log
        self.assigned: dict[str, list[str]] = {}  # kernel id -> UUIDs, oldest first
        self._starting: dict[int, list[str]] = {}  # picks whose kernel has not started yet
        self._picks = itertools.count()

    async def pick(self, env: Mapping[str, str]) -> tuple[int, list[str]] | None:
        """(a ticket, UUIDs) for a kernel about to start with ``env``; None when nothing is to be
        assigned. A kernel started with the server (a restored session) waits for the first
        sample. The pick counts at once, so kernels started together spread out; ``started``
        settles it."""
        if "CUDA_VISIBLE_DEVICES" in env:
            return None
        deadline = time.monotonic() + FIRST_SAMPLE_WAIT
        while (devices := self._devices()) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        alive = self._alive()
        for gone in [k for k in self.assigned if k not in alive]:
            del self.assigned[gone]
        holding = self._holding()
        held = [b for per_gpu in holding.values() for b in per_gpu.values() if b > 0]
        promise = self.quota or max(MIN_PROMISE, sum(held) // len(held) if held else 0)
        waiting: dict[str, int] = {}  # per UUID: kernels sent there that hold nothing there yet
        for kernel_id, uuids in [*self.assigned.items(), *((None, u) for u in self._starting.values())]:
            for uuid in uuids:
                if kernel_id is None or not holding.get(kernel_id, {}).get(uuid):
                    waiting[uuid] = waiting.get(uuid, 0) + 1
        try:
            chosen = choose(
                candidates(devices or []),
                count=self.count,
                promised={uuid: n * promise for uuid, n in waiting.items()},
                waiting=waiting,
            )
        except NotEnough as error:
            self.log.warning("jupyter_gpu: no GPU assigned to a new kernel: %s", error)
            return None
        ticket = next(self._picks)
        self._starting[ticket] = [d.uuid for d in chosen]
        return ticket, self._starting[ticket]

    def memory_of(self, uuids: list[str]) -> list[int]:
        """The total memory of these devices, as the latest sample has it (a MIG slice its own)."""
        totals = {d.get("uuid"): d.get("memory_total_bytes") for d in self._devices() or []}
        return [t for u in uuids if isinstance(t := totals.get(u), int) and t > 0]

    def started(self, ticket: int, kernel_id: str | None) -> None:
        """The kernel of a pick started (its id), or failed to (None)."""
        uuids = self._starting.pop(ticket)
        if kernel_id is not None:
            self.assigned[kernel_id] = uuids
        while len(self.assigned) > MAX_REMEMBERED:
            self.assigned.pop(next(iter(self.assigned)))
