"""The quota beyond PyTorch: memory the allocator does not govern (CuPy, JAX, a raw cudaMalloc, a
process the notebook started) shows only in NVML. A kernel whose process tree holds more than
``c.GPUMonitor.kernel_memory_limit`` on a GPU for ``over_limit_grace`` seconds gets
``over_limit_action``: ``warn``, ``interrupt``, ``restart`` or ``shutdown``, through jupyter_server's
kernel manager as its own culler acts, logged and emitted as an event (``events/kernel_over_limit.json``)
that JupyterLab shows as a notification. Once per time over: it acts again only after the kernel
has come back under the quota.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async

from ..analysis.units import format_bytes, format_duration

if TYPE_CHECKING:
    from .schema.replies import Kernel

EVENT_SCHEMA = Path(__file__).parent / "events" / "kernel_over_limit.json"
EVENT_ID = "https://jupyter-gpu.readthedocs.io/events/kernel-over-limit"
DONE = {
    "warn": "is over the quota",
    "interrupt": "was interrupted",
    "restart": "was restarted",
    "shutdown": "was shut down",
}


def message(action: str, kernel: Kernel, gpu_index: int, held: int, limit: int, grace: float) -> str:
    what = f"The kernel of {kernel['path']}" if kernel["path"] else f"Kernel {kernel['id'][:8]}"
    return (
        f"{what} {DONE[action]}: it held {format_bytes(held)} on GPU {gpu_index} for over "
        f"{format_duration(grace)}, more than this server's quota of {format_bytes(limit)} per kernel "
        "(memory PyTorch does not govern, or processes the notebook started)."
    )


class QuotaWatch:
    def __init__(
        self,
        kernel_manager: Any,
        event_logger: Any,
        limit: int,
        grace: float,
        action: str,
        log: logging.Logger,
        headroom: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kernel_manager = kernel_manager
        self.event_logger = event_logger
        self.limit, self.grace, self.action = limit, grace, action
        # NVML also counts what PyTorch's limit leaves out by design: the CUDA context (~0.5 GiB
        # on an H200), cuBLAS and NCCL workspaces. A kernel at its PyTorch limit is not over.
        self.headroom = headroom
        self.log = log
        self.clock = clock
        self._over_since: dict[str, float] = {}  # kernel id -> when it was first seen over
        self._acted: set[str] = set()  # kernels acted on in their present time over
        event_logger.register_event_schema(EVENT_SCHEMA)

    async def check(self, kernels: list[Kernel]) -> None:
        """One look at the kernels reply's figures (NVML's, per GPU, the process tree's)."""
        now = self.clock()
        for kernel in kernels:
            over = [
                row for row in kernel["gpu_memory"] if row["used_memory_bytes"] > self.limit + self.headroom
            ]
            if not over:
                self._over_since.pop(kernel["id"], None)
                self._acted.discard(kernel["id"])
                continue
            since = self._over_since.setdefault(kernel["id"], now)
            if now - since < self.grace or kernel["id"] in self._acted:
                continue
            worst = max(over, key=lambda row: row["used_memory_bytes"])
            try:
                await self._act(kernel["id"])
            except Exception as error:  # e.g. the kernel is stopping already: try at the next look
                self.log.warning(
                    "jupyter_gpu quota: could not %s kernel %s: %s", self.action, kernel["id"], error
                )
                continue
            self._acted.add(kernel["id"])
            self._tell(kernel, worst["gpu_index"], worst["used_memory_bytes"])
        for gone in set(self._over_since) - {k["id"] for k in kernels}:
            self._over_since.pop(gone)
            self._acted.discard(gone)

    async def _act(self, kernel_id: str) -> None:
        manager = self.kernel_manager
        if self.action == "interrupt":  # as jupyter_server's REST handlers call them
            await ensure_async(manager.interrupt_kernel(kernel_id))
        elif self.action == "restart":
            await ensure_async(manager.restart_kernel(kernel_id))
        elif self.action == "shutdown":
            await ensure_async(manager.shutdown_kernel(kernel_id))

    def _tell(self, kernel: Kernel, gpu_index: int, held: int) -> None:
        text = message(self.action, kernel, gpu_index, held, self.limit, self.grace)
        self.log.warning("jupyter_gpu quota: %s (kernel %s)", text, kernel["id"])
        self.event_logger.emit(
            schema_id=EVENT_ID,
            data={
                "action": self.action,
                "kernel_id": kernel["id"],
                "path": kernel["path"],
                "gpu_index": gpu_index,
                "memory_bytes": held,
                "limit_bytes": self.limit,
                "message": text,
            },
        )
