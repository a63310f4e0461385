"""Which notebook each GPU process in the history belonged to, for memory by notebook over time.

The kernel view (kernels.py) attributes the processes of the latest sample to kernels on every
refresh; this memo remembers those answers by PID, so that the history's older samples keep their
notebook after the kernel was shut down, and the telemetry reply can name the holder of every
process it lists. Bounded: the PIDs seen most recently, at most ``limit``.

``attributed`` reads that attribution out of a kernels reply, for this memo and for any client of
the reply (``jupyter gpu status``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .schema.replies import Kernel, KernelsReply, ProcessOwner


def attributed(kernels_reply: KernelsReply | None) -> dict[tuple[int | None, int], Kernel]:
    """(GPU index, PID) -> its kernel, for every GPU process a ``GET api/gpu/kernels`` reply joins
    to one of the server's kernels (each kernel's ``gpu_memory`` rows list their ``pids``). A list
    or field the reply lacks counts as empty: a client reads replies of servers it does not run."""
    return {
        (row.get("gpu_index"), pid): kernel
        for kernel in (kernels_reply.get("kernels") or () if kernels_reply else ())
        for row in kernel.get("gpu_memory") or ()
        for pid in row.get("pids") or ()
    }


def owners_of(kernels_payload: KernelsReply | None) -> dict[int, ProcessOwner]:
    """PID -> its kernel (id, name, notebook path), from a ``GET api/gpu/kernels`` payload."""
    return {
        pid: {"pid": pid, "kernel_id": kernel["id"], "name": kernel["name"], "path": kernel["path"]}
        for (_, pid), kernel in attributed(kernels_payload).items()
    }


class OwnerMemo:
    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._owners: OrderedDict[int, ProcessOwner] = OrderedDict()
        self._seen: object = None

    def update(self, kernels_payload: KernelsReply | None) -> None:
        """Learn from the kernel view's latest payload (once per payload: cheap on every request)."""
        if kernels_payload is None or kernels_payload is self._seen:
            return
        self._seen = kernels_payload
        for pid, owner in owners_of(kernels_payload).items():
            self._owners.pop(pid, None)
            self._owners[pid] = owner
        while len(self._owners) > self.limit:
            self._owners.popitem(last=False)

    def reply(self) -> list[ProcessOwner]:
        """The ``owners`` of the telemetry reply: one row per attributed PID."""
        return list(self._owners.values())
