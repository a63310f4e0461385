"""Join NVML's GPU processes with the server's kernels and sessions (pure function).

A GPU process belongs to a kernel when it is the kernel's process or a descendant of it
(DataLoader workers, subprocesses). PIDs that cannot be checked in this PID namespace are never
guessed at: one belongs to a kernel only when that kernel alone claims it, having matched itself
to it (``analysis/nvml_identity.py``, published in its stats file); the others are listed as
unattributed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from ..nvml.processes import ProcessMeta

if TYPE_CHECKING:
    from .schema.replies import GpuSample, KernelGpuMemory, UnattributedProcess


@dataclass(frozen=True)
class KernelRef:
    id: str
    name: str
    execution_state: str | None
    pid: int | None
    path: str | None
    last_activity: float | None = None  # unix seconds, as the kernel manager last saw activity
    connections: int = 0  # open websocket connections (notebook tabs), as the kernel manager counts


class AttributedKernel(TypedDict):
    """A kernel's fields of the kernels reply that the join gives; kernels.py adds the rest."""

    id: str
    name: str
    execution_state: str | None
    last_activity: float | None
    connections: int
    path: str | None
    pid: int | None
    gpu_memory: list[KernelGpuMemory]


class Attribution(TypedDict):
    """The join: the kernels reply's ``kernels`` (in part), ``unattributed`` and ``hidden_processes``."""

    kernels: list[AttributedKernel]
    unattributed: list[UnattributedProcess]
    hidden_processes: int


def _owner(
    meta: ProcessMeta | None, pid: int, kernel_pids: dict[int, str], claims: dict[int, str]
) -> str | None:
    if meta is None or meta.same_namespace is False:
        return claims.get(pid)
    for candidate in (pid, *meta.ancestors):
        if candidate in kernel_pids:
            return kernel_pids[candidate]
    return None


@dataclass(frozen=True)
class Unclaimed:
    """This server's kernels that could not claim a process of another PID namespace: without
    the extension, or whose agent cannot yet tell which process is its own."""

    without_extension: int = 0
    undecided: int = 0


FOREIGN = "NVML numbers it in another PID namespace (a container?), so it cannot be followed to a kernel here"


def _why_unattributed(meta: ProcessMeta | None, claimants: list[str], unclaimed: Unclaimed) -> str | None:
    """Why a process is no kernel's, where its user and command do not say it."""
    if len(claimants) > 1:
        return f"{len(claimants)} kernels of this server claim it, so none is given it: never a guess"
    if meta is not None and meta.same_namespace is not False:
        return None
    if unclaimed.without_extension:
        n = unclaimed.without_extension
        return (
            f"{FOREIGN}; {n} of this server's kernels {'has' if n == 1 else 'have'} not loaded jupyter_gpu "
            "(`%load_ext jupyter_gpu`), which lets a kernel find its own process"
        )
    if unclaimed.undecided:
        n = unclaimed.undecided
        return (
            f"{FOREIGN}; {n} of this server's kernels cannot yet tell which process is {'its' if n == 1 else 'their'} "
            "own (it will once its GPU memory changes)"
        )
    return f"{FOREIGN}; no kernel of this server claims it: another container's process"


def attribute(
    kernels: list[KernelRef],
    gpus: list[GpuSample],
    meta: dict[int, ProcessMeta],
    *,
    current_user: str | None,
    show_all_users: bool,
    claims: dict[str, int] | None = None,
    unclaimed: Unclaimed = Unclaimed(),
) -> Attribution:
    """Per-kernel GPU memory, unattributed processes, and how many others were hidden.
    ``claims``: kernel id → the NVML PID it matched itself to, in another PID namespace."""
    kernel_pids = {k.pid: k.id for k in kernels if k.pid is not None}
    claimed: dict[int, list[str]] = {}
    for claimant, nvml_pid in (claims or {}).items():
        claimed.setdefault(nvml_pid, []).append(claimant)
    # a PID two kernels claim is neither's: never a guess
    sole = {pid: ids[0] for pid, ids in claimed.items() if len(ids) == 1 and pid not in kernel_pids}
    usage: dict[str, dict[int, KernelGpuMemory]] = {k.id: {} for k in kernels}
    unattributed: list[UnattributedProcess] = []
    hidden = 0
    for gpu in gpus:
        for proc in gpu.get("processes") or ():
            pid = proc["pid"]
            info = meta.get(pid)
            kernel_id = _owner(info, pid, kernel_pids, sole)
            if kernel_id is not None:
                row = usage[kernel_id].setdefault(
                    gpu["index"],
                    {"gpu_index": gpu["index"], "uuid": gpu.get("uuid"), "used_memory_bytes": 0, "pids": []},
                )
                row["used_memory_bytes"] += proc["used_memory_bytes"] or 0
                row["pids"].append(pid)
                continue
            user = info.user if info else None
            if user is not None and user != current_user and not show_all_users:
                hidden += 1
                continue
            unattributed.append(
                {
                    "pid": pid,
                    "gpu_index": gpu["index"],
                    "uuid": gpu.get("uuid"),
                    "used_memory_bytes": proc["used_memory_bytes"],
                    "user": user,
                    "command": info.command if info else None,
                    "reason": _why_unattributed(info, claimed.get(pid, []), unclaimed),
                }
            )
    return {
        "kernels": [
            {
                "id": k.id,
                "name": k.name,
                "execution_state": k.execution_state,
                "last_activity": k.last_activity,
                "connections": k.connections,
                "path": k.path,
                "pid": k.pid,
                "gpu_memory": sorted(usage[k.id].values(), key=lambda r: r["gpu_index"]),
            }
            for k in kernels
        ],
        "unattributed": unattributed,
        "hidden_processes": hidden,
    }
