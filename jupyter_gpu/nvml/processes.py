"""Who a GPU process is: its ancestors, owner and command line (psutil adapter).

The facts behind every PID that NVML lists, for the server's sampler (``ProcessTable`` caches
them per PID, so a steady state costs no system calls), ``%gpu_mem`` and ``jupyter gpu status``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class ProcessMeta:
    pid: int
    ancestors: tuple[int, ...] = ()
    user: str | None = None
    command: str | None = None
    # False when this PID in our namespace has no NVIDIA device open, i.e. NVML's PID belongs to
    # another PID namespace (containers): such a process must not be attributed to anything.
    same_namespace: bool | None = None


def _opens_nvidia_device(proc: psutil.Process) -> bool | None:
    """None when we may not look (another user's process without root)."""
    try:
        fd_dir = f"/proc/{proc.pid}/fd"
        return any(
            os.readlink(os.path.join(fd_dir, fd)).startswith("/dev/nvidia") for fd in os.listdir(fd_dir)
        )
    except PermissionError:
        return None
    except (FileNotFoundError, ProcessLookupError, OSError):
        return None


def describe(pid: int, *, verify: bool = True) -> ProcessMeta:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            ancestors = tuple(p.pid for p in proc.parents())
            user = proc.username()
            cmdline = proc.cmdline()
        command = " ".join(cmdline)[:300] if cmdline else proc.name()
    except psutil.NoSuchProcess:
        return ProcessMeta(pid, same_namespace=False)
    except psutil.AccessDenied:
        return ProcessMeta(pid)
    return ProcessMeta(pid, ancestors, user, command, _opens_nvidia_device(proc) if verify else None)


class ProcessTable:
    """Cache of ``ProcessMeta`` keyed by PID, pruned to the PIDs NVML still reports."""

    def __init__(self, *, verify: bool = True) -> None:
        # `verify=False` only for simulated readings, whose PIDs never hold a real GPU.
        self.verify = verify
        self._cache: dict[int, ProcessMeta] = {}

    def lookup(self, pids: set[int]) -> dict[int, ProcessMeta]:
        for pid in pids - self._cache.keys():
            self._cache[pid] = describe(pid, verify=self.verify)
        for pid in self._cache.keys() - pids:
            del self._cache[pid]
        return dict(self._cache)
