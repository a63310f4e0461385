"""Which notebook each GPU process in the history belonged to, for memory by notebook over time.

The kernel view (kernels.py) attributes the processes of the latest sample to kernels on every
refresh; this memo remembers those answers by PID, so that the history's older samples keep their
notebook after the kernel was shut down, and the telemetry reply can name the holder of every
process it lists. Bounded: the PIDs seen most recently, at most ``limit``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


def owners_of(kernels_payload: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """PID -> its kernel (id, name, notebook path), from a ``GET api/gpu/kernels`` payload."""
    owners: dict[int, dict[str, Any]] = {}
    for kernel in (kernels_payload or {}).get("kernels", ()):
        owner = {"kernel_id": kernel["id"], "name": kernel["name"], "path": kernel["path"]}
        for row in kernel["gpu_memory"]:
            for pid in row["pids"]:
                owners[pid] = owner
    return owners


class OwnerMemo:
    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._owners: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._seen: object = None

    def update(self, kernels_payload: dict[str, Any] | None) -> None:
        """Learn from the kernel view's latest payload (once per payload: cheap on every request)."""
        if kernels_payload is None or kernels_payload is self._seen:
            return
        self._seen = kernels_payload
        for pid, owner in owners_of(kernels_payload).items():
            self._owners.pop(pid, None)
            self._owners[pid] = owner
        while len(self._owners) > self.limit:
            self._owners.popitem(last=False)

    def reply(self) -> list[dict[str, Any]]:
        """The ``owners`` of the telemetry reply: one row per attributed PID."""
        return [{"pid": pid, **owner} for pid, owner in self._owners.items()]
