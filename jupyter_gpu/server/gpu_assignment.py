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
        log: logging.Logger,
        quota: int | None = None,
    ) -> None:
        self.count = count
        self._devices = devices  # the latest sample's devices with their free memory; None: no sample yet
        self._holding = holding  # kernel id -> {UUID: bytes} it holds, as last attributed
        self.quota = quota
        self.log = log
        self.assigned: dict[str, list[str]] = {}  # kernel id -> UUIDs, oldest first

    async def pick(self, env: Mapping[str, str]) -> list[str] | None:
        """UUIDs for a kernel about to start with ``env``; None when nothing is to be assigned.
        A kernel started with the server (a restored session) waits for the first sample."""
        if "CUDA_VISIBLE_DEVICES" in env:
            return None
        deadline = time.monotonic() + FIRST_SAMPLE_WAIT
        while (devices := self._devices()) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        holding = self._holding()
        held = [b for per_gpu in holding.values() for b in per_gpu.values() if b > 0]
        promise = self.quota or max(MIN_PROMISE, sum(held) // len(held) if held else 0)
        waiting: dict[str, int] = {}  # per UUID: kernels sent there that hold nothing there yet
        for kernel_id, uuids in self.assigned.items():
            for uuid in uuids:
                if not holding.get(kernel_id, {}).get(uuid):
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
        return [d.uuid for d in chosen]

    def remember(self, kernel_id: str, uuids: list[str]) -> None:
        self.assigned[kernel_id] = uuids
        while len(self.assigned) > MAX_REMEMBERED:
            self.assigned.pop(next(iter(self.assigned)))
