"""Each kernel's per-cell timeline, as the server keeps it for the kernel's life.

The kernel's timeline (``kernel/timeline.py``) writes its last cells to
``jupyter_gpu-cells-<kernel id>.json``. The server reads that file as untrusted input, like the
allocator stats: ``runtime_dir.read_own_file`` (this user's regular file, nobody else may write
it, bounded size), ``analysis.cells.validate`` (bounded fields), the kernel id of its name, and
the PID of the kernel's own process. A refused file changes nothing the server already holds.

The server keeps what it has read, up to ``MAX_CELLS`` per kernel, so a reloaded page has the
cells, and so do the cells of a kernel's earlier process after a restart. A kernel that is shut
down is forgotten. File reads are blocking: callers run ``ingest`` on a worker thread.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from typing import Any

from ..analysis.cells import MAX_BYTES, MAX_CELLS, cells_file_name, validate
from ..runtime_dir import RefusedFile, read_own_file

NOT_LOADED = "no timeline yet: jupyter_gpu is not loaded in this kernel, or no cell has run since"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


class _KernelCells:
    def __init__(self) -> None:
        self.cells: deque[dict[str, Any]] = deque(maxlen=MAX_CELLS)
        self.last_seq: dict[int, int] = {}  # writer pid -> highest seq taken from it
        self.file_key: tuple[int, int, int] | None = None  # (inode, size, mtime) last read
        self.reason: str | None = NOT_LOADED


class CellHistory:
    """Kernel id → its cells, newest last. Safe to use from the event loop and worker threads."""

    def __init__(self) -> None:
        self._kernels: dict[str, _KernelCells] = {}
        self._lock = threading.Lock()

    def ingest(self, runtime_dir: str | os.PathLike[str], kernel_id: str, pid: int | None) -> None:
        """Take the new cells of the kernel's file, if the file can be trusted.

        ``pid`` is the kernel's process, when the server knows it: a file of another process
        (an earlier one of a restarted kernel, or a forgery) is not taken.
        """
        with self._lock:
            entry = self._kernels.setdefault(kernel_id, _KernelCells())
        try:
            path = os.path.join(os.fspath(runtime_dir), cells_file_name(kernel_id))
        except ValueError:
            entry.reason = "not a valid kernel id"
            return
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return  # none yet, or gone with its kernel: what was read stays
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        if key == entry.file_key:
            return  # read already, good or bad: a refused file is not read again and again
        entry.file_key = key
        try:
            doc = json.loads(read_own_file(path, MAX_BYTES), parse_constant=_reject_constant)
        except FileNotFoundError:
            return
        except RefusedFile as error:
            entry.reason = f"timeline file {error}"
            return
        except (ValueError, RecursionError):
            entry.reason = "timeline file is not valid JSON (truncated or corrupt)"
            return
        clean, why = validate(doc, kernel_id)
        if clean is None:
            entry.reason = f"timeline file is malformed: {why}"
            return
        if pid is not None and clean["pid"] != pid:
            entry.reason = f"timeline file was written by process {clean['pid']}, not this kernel's"
            return
        with self._lock:
            entry.reason = None
            seen = entry.last_seq.get(clean["pid"], -1)
            fresh = [c for c in clean["cells"] if c["seq"] > seen]
            if fresh:
                entry.last_seq[clean["pid"]] = fresh[-1]["seq"]
                entry.cells.extend({**c, "pid": clean["pid"]} for c in fresh)

    def cells(self, kernel_id: str) -> tuple[list[dict[str, Any]], str | None]:
        """The kernel's cells, oldest first, and why its file was not taken (None when it was)."""
        with self._lock:
            entry = self._kernels.get(kernel_id)
            if entry is None:
                return [], NOT_LOADED
            return list(entry.cells), entry.reason

    def keep_only(self, kernel_ids: set[str]) -> None:
        """Forget the kernels that were shut down."""
        with self._lock:
            for gone in self._kernels.keys() - kernel_ids:
                del self._kernels[gone]
