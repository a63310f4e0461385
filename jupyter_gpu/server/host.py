"""``GET api/gpu/host``: the container's limits (``container_limits``) with each kernel's resident
memory, read on a worker thread: /proc and /sys are files, and a slow or hung /proc must not
stall the event loop."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING

from .. import container_limits
from .schema import VERSION

if TYPE_CHECKING:
    from .schema.replies import HostReply, Kernel


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def read_host(kernels: list[tuple[str, int | None]]) -> HostReply:
    """Blocking: the server's limits and ``(kernel id, pid)``'s resident sizes."""
    limits = container_limits.read()
    return {
        "version": VERSION,
        "time": time.time(),
        "cgroup_version": 1 if limits.cgroup_version == 1 else 2 if limits.cgroup_version == 2 else None,
        "memory": {
            "limit_bytes": limits.memory_limit_bytes,
            "usage_bytes": limits.memory_usage_bytes,
            "oom_kills": limits.oom_kills,
        },
        "cpu": {"quota": limits.cpu_quota, "available": _available_cpus()},
        "pids": {"limit": limits.pids_limit, "current": limits.pids_current},
        "shm": {"size_bytes": limits.shm_size_bytes, "free_bytes": limits.shm_free_bytes},
        "kernels": [
            {"id": kid, "pid": pid, "rss_bytes": container_limits.resident_bytes(pid)} for kid, pid in kernels
        ],
        "unavailable": dict(limits.unavailable),
    }


async def host_reply(kernels: list[Kernel]) -> HostReply:
    """The reply, read off the event loop."""
    pairs = [(k["id"], k["pid"]) for k in kernels]
    return await asyncio.get_running_loop().run_in_executor(None, read_host, pairs)
