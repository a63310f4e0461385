"""Kernel ids → PIDs (kernel manager) and notebook paths (session manager), joined with NVML.

Runs on the event loop and does no blocking I/O there: the kernel manager answers from memory,
the session manager from its in-process database, the process metadata was gathered by the
sampler thread, and the kernels' allocator stats and timeline files are read on a worker thread.

Kernels come and go while it runs: one listed may be shut down by the time it is asked about
(left out), and one still starting has no activity yet, for which jupyter_server's
``kernel_model`` raises (listed as 'starting'). ``kernel_model`` here is the one way the
extension asks the manager about a kernel.
"""

from __future__ import annotations

import asyncio
import getpass
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

import psutil
from jupyter_core.utils import ensure_async
from tornado import web
from traitlets import TraitError

from ..analysis.idle import CullPolicy, cull_in, idle_holding, idle_seconds
from .attribution import AttributedKernel, KernelRef, Unclaimed, attribute
from .cell_history import CellHistory
from .kernel_stats import KernelStats, read_kernel_stats
from .sampler import Sampler
from .schema import VERSION
from .telemetry import header

if TYPE_CHECKING:
    from .schema.replies import Kernel, KernelsReply


class IdleFields(TypedDict):
    """A kernel's fields of the kernels reply about idling and culling (``Kernel`` has them)."""

    idle_seconds: float | None
    memory_bytes: int
    idle_holding: bool
    cull_in_seconds: float | None


def _kernel_pid(kernel: Any) -> int | None:
    """Only local kernels have a PID (remote and gateway provisioners have none)."""
    pid = getattr(getattr(kernel, "provisioner", None), "pid", None)
    return pid if isinstance(pid, int) else None


async def kernel_model(kernel_manager: Any, kernel_id: str) -> dict[str, Any] | None:
    """The kernel manager's model of a kernel (``execution_state``, ``last_activity``,
    ``connections``), None once the kernel is gone.

    jupyter_server lists a kernel as soon as its process has started, a moment before it sets
    the kernel's ``last_activity``; its ``kernel_model`` raises for the kernel until then (a
    TraitError; an AttributeError where the attribute is missing). Such a kernel is starting.
    """
    try:
        return await ensure_async(kernel_manager.kernel_model(kernel_id))
    except (KeyError, web.HTTPError):  # shut down since it was listed
        return None
    except (TraitError, AttributeError):
        return {"id": kernel_id, "execution_state": "starting", "last_activity": None, "connections": 0}


async def notebook_paths(session_manager: Any) -> dict[str, str | None]:
    """Kernel id → the notebook of its session (from the session manager's in-process database)."""
    sessions = await ensure_async(session_manager.list_sessions())
    return {s["kernel"]["id"]: s.get("path") for s in sessions if s.get("kernel")}


def unix_time(iso: Any) -> float | None:
    """jupyter_server's ISO 8601 times end in 'Z', which Python 3.10's fromisoformat refuses."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class KernelView:
    def __init__(
        self,
        sampler: Sampler,
        kernel_manager: Any,
        session_manager: Any,
        *,
        show_all_users: bool,
        idle_after: float = 900.0,
        idle_min_memory: int = 1024**3,
        cull_policy: CullPolicy | None = None,
        memory_limit: int | None = None,
    ) -> None:
        self.sampler = sampler
        self.memory_limit = memory_limit  # the quota every kernel of this server starts with
        self.assignments: dict[str, list[str]] | None = None  # the GPU assigner's, when it runs
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.show_all_users = show_all_users
        self.idle_after = idle_after
        self.idle_min_memory = idle_min_memory
        self.cull_policy = cull_policy or CullPolicy(0.0, 0, 0.0, False)
        self.current_user = getpass.getuser()
        self.last: KernelsReply | None = None  # what Prometheus reports between refreshes
        self.cell_history = CellHistory()

    async def kernel_refs(self) -> list[KernelRef]:
        paths = await notebook_paths(self.session_manager)
        refs = []
        for kernel_id in self.kernel_manager.list_kernel_ids():
            # The manager's own model: activity and connections as its culler sees them.
            model = await kernel_model(self.kernel_manager, kernel_id)
            if model is None or kernel_id not in self.kernel_manager:
                continue  # shut down since list_kernel_ids()
            kernel = self.kernel_manager.get_kernel(kernel_id)
            refs.append(
                KernelRef(
                    id=kernel_id,
                    name=getattr(kernel, "kernel_name", ""),
                    execution_state=model.get("execution_state"),
                    pid=_kernel_pid(kernel),
                    path=paths.get(kernel_id),
                    last_activity=unix_time(model.get("last_activity")),
                    connections=int(model.get("connections") or 0),
                )
            )
        return refs

    def read_files(self, refs: list[KernelRef]) -> dict[str, KernelStats]:
        """Each kernel's stats file, and the new cells of its timeline file; blocking file I/O,
        so called on a worker thread."""
        runtime_dir = self.kernel_manager.connection_dir
        result = {}
        for ref in refs:
            # A file written by an earlier process of a restarted kernel is not this kernel's.
            alive = (lambda pid, own=ref.pid: pid == own) if ref.pid else psutil.pid_exists
            result[ref.id] = read_kernel_stats(runtime_dir, ref.id, pid_alive=alive)
            self.cell_history.ingest(runtime_dir, ref.id, ref.pid)
        self.cell_history.keep_only({ref.id for ref in refs})
        return result

    async def refresh(self) -> KernelsReply:
        """The kernels reply; ``actions_allowed`` is False here: what the user asking may do is
        for the handler to say."""
        status = self.sampler.status
        latest = self.sampler.latest()
        gpus = list(latest.gpus) if latest and status.available else []
        refs = await self.kernel_refs()
        stats = await asyncio.get_running_loop().run_in_executor(None, self.read_files, refs)
        view = attribute(
            refs,
            gpus,
            self.sampler.process_meta(),
            current_user=self.current_user,
            show_all_users=self.show_all_users,
            claims={kid: st.nvml_pid for kid, st in stats.items() if st.nvml_pid is not None},
            unclaimed=Unclaimed(
                without_extension=sum(
                    st.reason is not None and st.reason.state == "no_stats" for st in stats.values()
                ),
                undecided=sum(st.nvml_match in ("ambiguous", "unmatched") for st in stats.values()),
            ),
        )
        now = time.time()
        kernels: list[Kernel] = [
            {
                **kernel,
                **stats[kernel["id"]].api_fields(),
                **self.idle_fields(kernel, now),
                "memory_limit_bytes": self.memory_limit,
                "assigned_gpus": None if self.assignments is None else self.assignments.get(kernel["id"]),
            }
            for kernel in view["kernels"]
        ]
        payload: KernelsReply = {
            **header(status),
            "kernels": kernels,
            "unattributed": view["unattributed"],
            "hidden_processes": view["hidden_processes"],
            "idle_after_seconds": self.idle_after,
            "idle_min_memory_bytes": self.idle_min_memory,
            "actions_allowed": False,
        }
        self.last = payload
        return payload

    def holding(self) -> dict[str, dict[str, int]]:
        """Kernel id -> {GPU UUID: bytes} it held at the last refresh."""
        last = self.last
        if last is None:
            return {}
        return {
            k["id"]: {row["uuid"]: row["used_memory_bytes"] for row in k["gpu_memory"] if row["uuid"]}
            for k in last["kernels"]
        }

    def idle_fields(self, kernel: AttributedKernel, now: float) -> IdleFields:
        """How long the kernel has sat idle, on how much GPU memory, and when the culler acts."""
        idle = idle_seconds(kernel["execution_state"], kernel["last_activity"], now)
        memory = sum(row["used_memory_bytes"] for row in kernel["gpu_memory"])
        return {
            "idle_seconds": idle,
            "memory_bytes": memory,
            "idle_holding": idle_holding(
                idle, memory, after=self.idle_after, min_memory=self.idle_min_memory
            ),
            "cull_in_seconds": cull_in(self.cull_policy, idle, memory, kernel["connections"]),
        }

    def running_cell(self, kernel_id: str, pid: int | None) -> dict[str, Any] | None:
        """The cell the kernel last said was running, read afresh from its timeline file (a
        killed kernel leaves it behind); blocking, for a worker thread."""
        self.cell_history.ingest(self.kernel_manager.connection_dir, kernel_id, pid)
        return self.cell_history.running(kernel_id)

    async def cells(self, kernel_id: str, since: int | None, limit: int) -> str | None:
        """``GET api/gpu/kernels/<id>/cells``: a page of the kernel's timeline (``CellHistory.page``),
        as the reply's body; None for no such kernel."""
        ref = next((r for r in await self.kernel_refs() if r.id == kernel_id), None)
        if ref is None:
            return None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, self.cell_history.ingest, self.kernel_manager.connection_dir, ref.id, ref.pid
        )
        page = self.cell_history.page(kernel_id, since, limit)
        return page.json({"version": VERSION, "kernel_id": kernel_id, "path": ref.path})
