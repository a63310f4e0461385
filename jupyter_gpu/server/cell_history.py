"""Each kernel's per-cell timeline, as the server keeps it for the kernel's life.

The kernel's timeline (``kernel/timeline.py``) writes its last cells to
``jupyter_gpu-cells-<kernel id>.json`` (or its private name while another user's file holds that
name: ``runtime_dir.published_path``). The server reads that file as untrusted input, like the
allocator stats: ``runtime_dir.read_own_file`` (this user's regular file, nobody else may write
it, bounded size), ``analysis.cells.validate`` (bounded fields), the kernel id of its name, and
the PID of the kernel's own process. A refused file changes nothing the server already holds.

The server keeps what it has read, up to ``MAX_CELLS`` per kernel, so a reloaded page has the
cells, and so do the cells of a kernel's earlier process after a restart. A kernel that is shut
down is forgotten. File reads are blocking: callers run ``ingest`` on a worker thread.

Each cell is kept encoded, as the reply carries it, with its place in the order the server took
the kernel's cells (its position, from 1): a reply is a page of those texts joined, at most
``limit`` cells and ``PAGE_BYTES`` of them, so that a kernel that fills its 1,000 cells with the
largest records (``analysis.cells.MAX_RECORD_BYTES``) cannot make one reply hold the event loop.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.cells import (
    MAX_BYTES,
    MAX_CELLS,
    MAX_RECORD_BYTES,
    cells_file_name,
    exact_peak,
    left_bytes,
    top,
    validate,
)
from ..runtime_dir import NameTaken, RefusedFile, published_path, read_own_file

if TYPE_CHECKING:
    from .schema.replies import RankedCell

NOT_LOADED = "no timeline yet: jupyter_gpu is not loaded in this kernel, or no cell has run since"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


# The cells of one reply, encoded: all 1,000 cells of a kernel on 8 GPUs (~1.3 MB) fit, and at
# least 32 of the largest records; joining and sending them takes the event loop a few ms.
PAGE_BYTES = 32 * MAX_RECORD_BYTES
# Cells the reply names as those that left the most memory, and that peaked highest.
RANKED = 5


@dataclass(frozen=True)
class Kept:
    """A cell as the server keeps it: encoded once, with the figures its rankings need."""

    pid: int
    seq: int
    left: int  # analysis.cells.left_bytes
    peak: int | None  # analysis.cells.exact_peak
    text: str  # its JSON in the reply

    @classmethod
    def of(cls, pid: int, cell: dict[str, Any]) -> Kept:
        text = json.dumps({**cell, "pid": pid}, separators=(",", ":"))
        return cls(pid, cell["seq"], left_bytes(cell), exact_peak(cell), text)


@dataclass(frozen=True)
class Page:
    """What one ``GET api/gpu/kernels/<id>/cells`` carries of the kernel's cells."""

    cells: list[Kept]
    cursor: int  # the position of its last cell (with none: of the newest cell taken)
    more: bool  # cells after ``cursor`` were left for the next page
    reason: str | None
    most_left: list[RankedCell]
    highest_peaks: list[RankedCell]

    def json(self, head: dict[str, Any]) -> str:
        """The reply's body: ``head``'s fields, this page's, and its cells as they were kept."""
        fields = {
            **head,
            "reason": self.reason,
            "cursor": self.cursor,
            "more": self.more,
            "most_left": self.most_left,
            "highest_peaks": self.highest_peaks,
        }
        return f'{json.dumps(fields)[:-1]}, "cells": [{",".join(k.text for k in self.cells)}]}}'


def _named(ranked: list[tuple[Kept, int]]) -> list[RankedCell]:
    return [{"pid": kept.pid, "seq": kept.seq, "bytes": n} for kept, n in ranked]


class _KernelCells:
    def __init__(self) -> None:
        self.cells: deque[Kept] = deque(maxlen=MAX_CELLS)
        self.taken = 0  # cells taken over the kernel's life: the position of the newest
        self.last_seq: dict[int, int] = {}  # writer pid -> highest seq taken from it
        self.file_key: tuple[int, int, int] | None = None  # (inode, size, mtime) last read
        self.reason: str | None = NOT_LOADED
        self.running: dict[str, Any] | None = None  # the cell running at the file's last write


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
            name = cells_file_name(kernel_id)
        except ValueError:
            entry.reason = "not a valid kernel id"
            return
        try:
            path = published_path(runtime_dir, kernel_id, name)
        except NameTaken as error:
            entry.reason = str(error)
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
        writer = clean["pid"]
        with self._lock:
            seen = entry.last_seq.get(writer, -1)
        # Encoded outside the lock, which the event loop takes to serve a page.
        fresh = [Kept.of(writer, c) for c in clean["cells"] if c["seq"] > seen]
        with self._lock:
            entry.reason = None
            entry.running = clean["running"]
            seen = entry.last_seq.get(writer, -1)  # another thread may have taken some meanwhile
            fresh = [kept for kept in fresh if kept.seq > seen]
            if fresh:
                entry.cells.extend(fresh)
                entry.taken += len(fresh)
                entry.last_seq[writer] = fresh[-1].seq

    def page(self, kernel_id: str, since: int | None = None, limit: int = MAX_CELLS) -> Page:
        """The kernel's cells after position ``since``, oldest first, at most ``limit`` of them
        and ``PAGE_BYTES`` (always one at least); without ``since``, the newest that fit. The
        rankings are over every cell kept, and name cells this page may not hold."""
        with self._lock:
            entry = self._kernels.get(kernel_id)
            if entry is None:
                return Page([], 0, False, NOT_LOADED, [], [])
            kept, taken, reason = list(entry.cells), entry.taken, entry.reason
        first = taken - len(kept) + 1  # the position of kept[0]
        if since is None:
            cells = _fill(reversed(kept), limit)[::-1]
            cursor, more = taken, False
        else:
            start = min(max(0, since + 1 - first), len(kept))
            cells = _fill(kept[start:], limit)
            cursor = first + start + len(cells) - 1 if cells else taken
            more = start + len(cells) < len(kept)
        return Page(
            cells,
            cursor,
            more,
            reason,
            _named(top(((k, k.left) for k in kept), RANKED)),
            _named(top(((k, k.peak) for k in kept), RANKED)),
        )

    def running(self, kernel_id: str) -> dict[str, Any] | None:
        """The cell the kernel said was running when it last wrote its file (None between cells)."""
        with self._lock:
            entry = self._kernels.get(kernel_id)
            return None if entry is None else entry.running

    def keep_only(self, kernel_ids: set[str]) -> None:
        """Forget the kernels that were shut down."""
        with self._lock:
            for gone in self._kernels.keys() - kernel_ids:
                del self._kernels[gone]


def _fill(cells: Iterable[Kept], limit: int) -> list[Kept]:
    """The first of ``cells`` up to ``limit`` of them and ``PAGE_BYTES`` (always one at least)."""
    page: list[Kept] = []
    size = 0
    for kept in cells:
        size += len(kept.text) + 1
        if len(page) == limit or (page and size > PAGE_BYTES):
            break
        page.append(kept)
    return page
