"""The GPU-aware culler: shuts down kernels that sit idle on GPU memory (``c.GPUMonitor.cull_*``).

It follows jupyter_server's own culler (``c.MappingKernelManager.cull_*``): never a busy kernel,
kernels with open connections only with ``cull_connected``, shutdown through the kernel manager.
What differs is the memory: by default only kernels holding ``cull_min_memory`` of GPU memory
go. Each warning and shutdown is logged and emitted as a jupyter_server event
(``events/kernel_culled.json``), which JupyterLab turns into a notification.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.idle import IDLE_STATES, CullPolicy, cull_action
from ..analysis.units import format_bytes, format_duration
from .kernels import KernelView, kernel_model, unix_time

if TYPE_CHECKING:
    from .schema.replies import Kernel

EVENT_SCHEMA = Path(__file__).parent / "events" / "kernel_culled.json"
EVENT_ID = "https://jupyter-gpu.readthedocs.io/events/kernel-culled"


def _what(kernel: Kernel) -> str:
    return f"GPU kernel of {kernel['path']}" if kernel["path"] else f"GPU kernel {kernel['id'][:8]}"


def message(action: str, kernel: Kernel, remaining: float) -> str:
    """The sentence the log and the notification carry; it names the kernel, not the notebook,
    as what stops: the notebook file is untouched."""
    held = format_bytes(kernel["memory_bytes"])
    idle = format_duration(kernel["idle_seconds"])
    if action == "warn":
        return (
            f"{_what(kernel)} will be shut down in {format_duration(remaining)} unless it is used: "
            f"idle {idle}, holding {held}."
        )
    return f"{_what(kernel)} was shut down after {idle} idle holding {held}. The notebook is unchanged."


class Culler:
    def __init__(
        self,
        kernels: KernelView,
        kernel_manager: Any,
        event_logger: Any,
        policy: CullPolicy,
        log: logging.Logger,
    ) -> None:
        self.kernels = kernels
        self.kernel_manager = kernel_manager
        self.event_logger = event_logger
        self.policy = policy
        self.log = log
        self.warned: set[str] = set()
        event_logger.register_event_schema(EVENT_SCHEMA)

    async def check(self) -> None:
        """One pass over the kernels: warn those about to go, shut down those whose time is up."""
        view = await self.kernels.refresh()
        for kernel in view["kernels"]:
            remaining = kernel["cull_in_seconds"]
            action = cull_action(remaining, self.policy.warn_before, kernel["id"] in self.warned)
            if remaining is None or remaining > self.policy.warn_before:
                self.warned.discard(kernel["id"])  # used again since a warning: warn again next time
            if action == "warn":
                self.warned.add(kernel["id"])
                self._tell("warn", kernel, remaining or 0.0)
            elif action == "cull" and await self._still_idle(kernel):
                self.warned.discard(kernel["id"])
                await self.kernel_manager.shutdown_kernel(kernel["id"])
                self._tell("cull", kernel, 0.0)

    async def _still_idle(self, kernel: Kernel) -> bool:
        """Nothing happened in the kernel since the view was made (a cell may have started)."""
        model = await kernel_model(self.kernel_manager, kernel["id"])
        if model is None:  # gone already
            return False
        activity = unix_time(model.get("last_activity"))
        return model.get("execution_state") in IDLE_STATES and activity == kernel["last_activity"]

    def _tell(self, action: str, kernel: Kernel, remaining: float) -> None:
        text = message(action, kernel, remaining)
        self.log.warning("jupyter_gpu culler: %s (kernel %s)", text, kernel["id"])
        self.event_logger.emit(
            schema_id=EVENT_ID,
            data={
                "action": action,
                "kernel_id": kernel["id"],
                "path": kernel["path"],
                "idle_seconds": kernel["idle_seconds"],
                "memory_bytes": kernel["memory_bytes"],
                "cull_in_seconds": remaining,
                "message": text,
            },
        )
