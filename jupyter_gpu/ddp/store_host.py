"""torchrun's contract for scripts and the preflight all-reduce: a ``TCPStore`` for ``env://``.

A script calls ``init_process_group()`` and expects ``MASTER_ADDR``/``MASTER_PORT``, so its
ranks need a TCP store. It listens on 127.0.0.1 only (torch's own binds every interface) and is
served by a process of its own, forked from the forkserver (fast: torch is imported there),
that dies with the kernel: whatever another local user writes into it is held by that process,
never by the notebook's kernel. It carries torch's bootstrap keys only; cells never use it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
from datetime import timedelta
from typing import Any

from .forkserver import use_forkserver


def loopback_store() -> Any:
    """A ``TCPStore`` server that listens on 127.0.0.1 only."""
    import torch.distributed as dist

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    return dist.TCPStore(
        "127.0.0.1",
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=60),
        master_listen_fd=listener.detach(),
    )


def host_store(conn: Any, kernel_pid: int) -> None:
    """Entry point of the store's own process: serve until the kernel closes the pipe or dies."""
    from .lifeline import bind_to_kernel, detach_from_terminal_signals

    detach_from_terminal_signals()  # a kernel interrupt reaches the process group: not for us
    bind_to_kernel(kernel_pid)
    server = loopback_store()
    conn.send(server.port)
    with contextlib.suppress(EOFError, OSError):
        conn.recv()


class StoreHost:
    """The store's process, started and ended by the kernel."""

    def __init__(self, start_timeout: float = 60.0) -> None:
        use_forkserver()
        ctx = multiprocessing.get_context("forkserver")
        self._conn, theirs = ctx.Pipe()
        self._process = ctx.Process(
            target=host_store, args=(theirs, os.getpid()), name="jupyter_gpu-ddp-store", daemon=True
        )
        self._process.start()
        theirs.close()
        if not self._conn.poll(start_timeout):
            self.close()
            raise RuntimeError("the DDP store did not start")
        self.port: int = self._conn.recv()

    def close(self) -> None:
        self._conn.close()  # the host's recv() returns: it exits
        self._process.join(1.0)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(1.0)
