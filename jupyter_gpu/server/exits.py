"""Why this server's kernels died: each kernel watched from its start, its death classified
(``analysis/exits.py``), kept for ``GET api/gpu/exits`` and told to its owner as an event.

A death is what jupyter_client's restarter sees: the process ended without being asked to. A
shutdown or restart the user asked for stops the restarter first, so it is never listed. The
facts are gathered where they are cheap: the exit status from the provisioner's ``Popen`` in the
restarter's callback (on the event loop, no I/O), the cgroup counters and the kernel's resident
size on a worker thread, the GPU errors from the XID thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import container_limits
from ..analysis.exits import Seen, classify
from .schema import VERSION

if TYPE_CHECKING:
    from .schema.replies import Device, ExitsReply, Kernel, KernelExit

EVENT_SCHEMA = Path(__file__).parent / "events" / "kernel_died.json"
EVENT_ID = "https://jupyter-gpu.readthedocs.io/events/kernel-died"
MAX_EXITS = 100  # kept for the reply, newest last
MAX_XIDS = 1000  # GPU errors remembered to match against deaths
CALLBACK_EVENTS = ("restart", "dead")
KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"  # the restarter's names for "it died" (and "gave up")


@dataclass
class Watched:
    """A kernel process as the server last saw it alive."""

    pid: int | None
    since: float
    path: str | None = None
    cgroup: container_limits.MemoryCgroup | None = None  # its memory cgroup, read again once it died
    oom_kills: int | None = None  # there, when first seen
    memory_limit_bytes: int | None = None
    rss_bytes: int | None = None
    gpus: set[int] = field(default_factory=set)  # GPUs it held memory on (a MIG device's GPU)
    running_cell: int | None = None


def _baseline(pid: int | None) -> Watched:
    """A live kernel's memory cgroup, its counters and resident size: blocking, off the loop."""
    seen = Watched(pid, time.time())
    found = container_limits.memory_cgroup(pid) if pid is not None else None
    if isinstance(found, container_limits.MemoryCgroup):
        seen.cgroup = found
        seen.oom_kills, seen.memory_limit_bytes = found.oom_kills(), found.limit_bytes()
    seen.rss_bytes = container_limits.resident_bytes(pid)
    return seen


class ExitLog:
    """Kernel id → what is known of it; the deaths seen, newest last."""

    def __init__(
        self,
        kernel_manager: Any,
        event_logger: Any,
        log: logging.Logger,
        paths: Callable[[], Awaitable[dict[str, str | None]]],
        running_cell: Callable[[str, int | None], dict[str, Any] | None],
    ) -> None:
        self.kernel_manager = kernel_manager
        self.running_cell = running_cell  # (kernel id, pid) -> the cell it said was running; blocking
        self.paths = paths  # kernel id -> notebook: a death within seconds of the start has one too
        self.event_logger = event_logger
        self.log = log
        self.watched: dict[str, Watched] = {}
        self.exits: deque[KernelExit] = deque(maxlen=MAX_EXITS)
        self._xids: deque[tuple[float, int, int]] = deque(maxlen=MAX_XIDS)
        self._xid_counts: Counter[tuple[int, int]] = Counter()  # (gpu, xid) -> since start
        self._xid_lock = threading.Lock()  # the XID thread counts, a scrape reads
        self._callbacks: set[str] = set()  # kernels whose restarter calls us
        self._tasks: set[asyncio.Task[None]] = set()
        event_logger.register_event_schema(EVENT_SCHEMA)
        event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._on_kernel_action)

    def xid(self, gpu: int, xid: int, when: float) -> None:
        """A GPU error, from the XID thread (a deque's append is atomic; readers copy it)."""
        self._xids.append((when, gpu, xid))
        with self._xid_lock:
            self._xid_counts[(gpu, xid)] += 1

    def xid_counts(self) -> dict[tuple[int, int], int]:
        """(GPU index, Xid) → how many NVML reported since the server started."""
        with self._xid_lock:
            return dict(self._xid_counts)

    async def update(self, kernels: list[Kernel], devices: list[Device]) -> None:
        """Learn the live kernels from the kernel view's latest reply: new or restarted ones
        are watched from now, shut-down ones forgotten, the others' resident size refreshed.
        ``devices``: the sampler's, whose MIG devices take the errors (Xids) of their GPU."""
        gpu_of = {d["index"]: d["mig"]["parent_index"] for d in devices if d["mig"] is not None}
        live = {k["id"] for k in kernels}
        for gone in self.watched.keys() - live:
            del self.watched[gone]
        self._callbacks &= live
        for kernel in kernels:
            seen = await self.watch(kernel["id"], kernel["pid"])
            if seen is None:
                continue
            seen.path = kernel["path"]
            seen.gpus = {gpu_of.get(i, i) for i in (row["gpu_index"] for row in kernel["gpu_memory"])}

    async def watch(self, kernel_id: str, pid: int | None) -> Watched | None:
        """Watch the kernel's process ``pid`` (again, after a restart); None once it is gone."""
        loop = asyncio.get_running_loop()
        seen = self.watched.get(kernel_id)
        if seen is None or seen.pid != pid:
            seen = await loop.run_in_executor(None, _baseline, pid)
            if kernel_id in self.watched and self.watched[kernel_id].pid == pid:
                return self.watched[kernel_id]  # another call got there first
            self.watched[kernel_id] = seen
        else:
            seen.rss_bytes = (
                await loop.run_in_executor(None, container_limits.resident_bytes, pid) or seen.rss_bytes
            )
        self._listen(kernel_id)
        return seen if kernel_id in self.watched else None

    async def _on_kernel_action(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """jupyter_server's kernel_actions event: a kernel started or restarted is watched at
        once, not at the next refresh (a cell may kill it within seconds)."""
        if data.get("action") not in ("start", "restart") or data.get("status") != "success":
            return
        kernel_id = data.get("kernel_id")
        if not isinstance(kernel_id, str):
            return
        try:
            pid = getattr(self.kernel_manager.get_kernel(kernel_id).provisioner, "pid", None)
        except KeyError:
            return
        await self.watch(kernel_id, pid if isinstance(pid, int) else None)

    def _listen(self, kernel_id: str) -> None:
        if kernel_id in self._callbacks:
            return
        try:
            for event in CALLBACK_EVENTS:
                self.kernel_manager.add_restart_callback(kernel_id, lambda k=kernel_id: self._died(k), event)
        except KeyError:  # shut down meanwhile
            return
        self._callbacks.add(kernel_id)

    def _died(self, kernel_id: str) -> None:
        """The restarter's callback: the process is gone. Only what is in memory here."""
        seen = self.watched.get(kernel_id)
        if seen is None:
            return
        try:
            process = getattr(self.kernel_manager.get_kernel(kernel_id).provisioner, "process", None)
        except KeyError:
            process = None
        code = getattr(process, "returncode", None)
        task = asyncio.ensure_future(self._record(kernel_id, seen, code if isinstance(code, int) else None))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record(self, kernel_id: str, seen: Watched, returncode: int | None) -> None:
        now = time.time()
        if seen.path is None:
            seen.path = (await self.paths()).get(kernel_id)
        loop = asyncio.get_running_loop()
        running = await loop.run_in_executor(None, self.running_cell, kernel_id, seen.pid)
        if running is not None:  # from this process's file: another's is refused by its pid
            seen.running_cell = running["execution_count"]
        cgroup = seen.cgroup
        after = await loop.run_in_executor(None, cgroup.oom_kills) if cgroup else None
        xids = tuple(
            (gpu, xid) for when, gpu, xid in list(self._xids) if when >= seen.since and gpu in seen.gpus
        )
        cause = classify(
            Seen(
                returncode,
                seen.oom_kills,
                after,
                seen.memory_limit_bytes,
                seen.rss_bytes,
                xids,
                seen.running_cell,
            )
        )
        record: KernelExit = {
            "kernel_id": kernel_id,
            "path": seen.path,
            "pid": seen.pid,
            "time": now,
            "cause": cause.cause,
            "detail": cause.detail,
            "last_cell": seen.running_cell,
        }
        self.exits.append(record)
        if self.watched.get(kernel_id) is seen:  # the restarted process may be watched already
            del self.watched[kernel_id]
        where = f"{seen.path}: " if seen.path else ""
        self.log.warning("jupyter_gpu: %s%s (kernel %s)", where, cause.detail, kernel_id)
        self.event_logger.emit(schema_id=EVENT_ID, data={**record, "message": f"{where}{cause.detail}"})

    def reply(self) -> ExitsReply:
        return {"version": VERSION, "exits": list(self.exits)}
