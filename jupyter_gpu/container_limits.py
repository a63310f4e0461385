"""The container's limits as the kernel's cgroups and ``/dev/shm`` state them: a thin reader over
``/proc`` and ``/sys/fs/cgroup``; what the text means is ``analysis/cgroups.py``.

Blocking file reads: the server calls ``read`` off the event loop. Each file is read up to a
bound (the kernel writes them, but a bind-mounted ``/proc`` in a container is the
container's), and each part that cannot be read says why in ``unavailable``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from .analysis import cgroups

PROC = "/proc"
SHM = "/dev/shm"
MAX_FILE_BYTES = 64 * 1024  # a controller's file is a few lines
MAX_MOUNTINFO_BYTES = 4 * 1024 * 1024  # a Kubernetes node shows thousands of mounts


@dataclass
class Limits:
    """One reading of a process's limits; ``None`` is "not known", with the reason beside."""

    cgroup_version: int | None = None
    memory_limit_bytes: int | None = None
    memory_usage_bytes: int | None = None
    oom_kills: int | None = None
    cpu_quota: float | None = None
    pids_limit: int | None = None
    pids_current: int | None = None
    shm_size_bytes: int | None = None
    shm_free_bytes: int | None = None
    unavailable: dict[str, str] = field(default_factory=dict)


def _read(path: str, limit: int = MAX_FILE_BYTES) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _folders(pid: int | str, controller: str, proc: str) -> tuple[list[str], int] | str:
    """The process's folder for ``controller`` and its ancestors up to the mount (nearest
    first), or why there is none."""
    member = _read(f"{proc}/{pid}/cgroup")
    mountinfo = _read(f"{proc}/self/mountinfo", MAX_MOUNTINFO_BYTES)
    if member is None or mountinfo is None:
        return f"cannot read {proc}/{pid}/cgroup"
    mounted = cgroups.mounts(mountinfo)
    found = cgroups.controller_folder(controller, cgroups.memberships(member), mounted)
    if found is None:
        return f"no {controller} cgroup is mounted where this server can read it"
    folder, version = found
    top = max(
        (m.point for m in mounted if folder.startswith(m.point.rstrip("/") + "/") or folder == m.point),
        key=len,
    )
    chain = [folder]
    while chain[-1] != top and os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    return chain, version


@dataclass(frozen=True)
class MemoryCgroup:
    """A process's memory cgroup: its folder and those above it (nearest first). Kept while the
    process lives, so that its counters can still be read once it has died."""

    chain: tuple[str, ...]
    version: int

    def limit_bytes(self) -> int | None:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        return cgroups.tightest([cgroups.limit(_read(f"{d}/{name}")) for d in self.chain])

    def usage_bytes(self) -> int | None:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return cgroups.count(_read(f"{self.chain[0]}/{name}"))

    def oom_kills(self) -> int | None:
        """The OOM killer's victims here: v1 counts only the victim's own cgroup, v2 the subtree,
        so the process's own folder is the one to read either way."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return cgroups.keyed(_read(f"{self.chain[0]}/{name}")).get("oom_kill")


def memory_cgroup(pid: int | str = "self", *, proc: str = PROC) -> MemoryCgroup | str:
    """``pid``'s memory cgroup, or why it cannot be read."""
    found = _folders(pid, "memory", proc)
    if isinstance(found, str):
        return found
    chain, version = found
    return MemoryCgroup(tuple(chain), version)


def _memory(limits: Limits, pid: int | str, proc: str) -> None:
    found = memory_cgroup(pid, proc=proc)
    if isinstance(found, str):
        limits.unavailable["memory"] = found
        return
    limits.cgroup_version = found.version
    limits.memory_limit_bytes = found.limit_bytes()
    limits.memory_usage_bytes = found.usage_bytes()
    limits.oom_kills = found.oom_kills()
    if limits.memory_usage_bytes is None:
        limits.unavailable["memory"] = f"cannot read the memory cgroup's usage in {found.chain[0]}"


def _found(limits: Limits, controller: str, pid: int | str, proc: str) -> tuple[list[str], int] | None:
    """The controller's folders, or None with the reason noted in ``limits``."""
    found = _folders(pid, controller, proc)
    if isinstance(found, str):
        limits.unavailable[controller] = found
        return None
    return found


def _cpu(limits: Limits, pid: int | str, proc: str) -> None:
    found = _found(limits, "cpu", pid, proc)
    if found is None:
        return
    chain, version = found
    if version == 2:
        quotas = [cgroups.cpu_quota_v2(_read(f"{d}/cpu.max")) for d in chain]
    else:
        quotas = [
            cgroups.cpu_quota_v1(_read(f"{d}/cpu.cfs_quota_us"), _read(f"{d}/cpu.cfs_period_us"))
            for d in chain
        ]
    set_ = [q for q in quotas if q is not None]
    limits.cpu_quota = min(set_) if set_ else None


def _pids(limits: Limits, pid: int | str, proc: str) -> None:
    found = _found(limits, "pids", pid, proc)
    if found is None:
        return
    chain, _ = found
    limits.pids_limit = cgroups.tightest([cgroups.limit(_read(f"{d}/pids.max")) for d in chain])
    limits.pids_current = cgroups.count(_read(f"{chain[0]}/pids.current"))


def _shm(limits: Limits, shm: str) -> None:
    try:
        st = os.statvfs(shm)
    except OSError as exc:
        limits.unavailable["shm"] = f"cannot read {shm}: {exc.strerror or exc}"
        return
    limits.shm_size_bytes = st.f_blocks * st.f_frsize
    limits.shm_free_bytes = st.f_bavail * st.f_frsize


def read(pid: int | str = "self", *, proc: str = PROC, shm: str = SHM) -> Limits:
    """The limits that bind process ``pid`` (the server by default), and ``/dev/shm``'s room."""
    limits = Limits()
    _memory(limits, pid, proc)
    _cpu(limits, pid, proc)
    _pids(limits, pid, proc)
    _shm(limits, shm)
    return limits


def resident_bytes(pid: int | None) -> int | None:
    """A process's resident memory, what the out-of-memory killer weighs; None once it is gone."""
    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None
