"""What a process tree has open, seen as root: the tests' view of a session's listeners."""

from __future__ import annotations

import psutil


def listeners(pid: int) -> set[tuple[str, int]]:
    """Every TCP listening address of ``pid`` and its descendants (forkserver, ranks)."""
    found = set()
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        try:
            found |= {
                (c.laddr.ip, c.laddr.port)
                for c in proc.net_connections("inet")
                if c.status == psutil.CONN_LISTEN
            }
        except psutil.NoSuchProcess:
            continue
    return found
