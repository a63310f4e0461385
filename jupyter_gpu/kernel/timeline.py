"""Record what each cell did to GPU memory, for the server's per-cell timeline.

``pre_run_cell`` and ``post_run_cell`` read the allocator of every CUDA device this kernel
uses (and NVML for the process's own device memory); ``analysis.cells.cell_record`` turns the
two readings into the cell's record. Until the user's code has initialised CUDA nothing is read
and cells are recorded without GPU figures: this never imports torch nor initialises CUDA.

The last ``MAX_CELLS`` records stay in memory (for ``%gpu_mem --cells`` and the out-of-memory
explanation) and, in a kernel, go to ``jupyter_gpu-cells-<kernel id>.json`` beside the
connection file (or its private name, ``runtime_dir.own_path``, while another user's file
holds that name): a daemon thread rewrites it at most once a second, only when cells were
added, from records encoded once each, so a long notebook costs the same as a short one.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..analysis.cells import (
    CELL_ID,
    MAX_BYTES,
    MAX_CELLS,
    MAX_RANKS,
    VERSION,
    DeviceReading,
    cell_record,
    cells_file_name,
)
from ..runtime_dir import beside_connection, own_path, remove_published, write_own_file
from ..torch_state import allocator_readings, nvml_uuid, torch_in_use

log = logging.getLogger(__name__)

WRITE_INTERVAL = 1.0  # seconds, at least, between two writes of the file


class ProcessMemory:
    """This process's device memory as NVML counts it, per GPU UUID; None when NVML cannot say.

    Listing a GPU's processes costs hundreds of microseconds, too much for every edge of every
    short cell. So NVML is asked at most once per ``FRESH_SECONDS`` per GPU (and whenever a GPU
    is new to the kernel, e.g. the cell that creates the CUDA context); in between, the figure
    follows the allocator's reserved bytes, which is where nearly all of a process's device
    memory comes and goes. Memory taken outside the allocator (NCCL buffers) by a short cell
    therefore shows in the next cell that reads NVML afresh. One NVML session for the kernel's
    life, on the kernel's main thread only.
    """

    FRESH_SECONDS = 1.0

    def __init__(self) -> None:
        self._reader: Any = None
        self._indices: dict[str, int | None] = {}
        self._last: dict[str, tuple[float, int | None, int]] = {}  # uuid -> (when, NVML, reserved)
        self._broken = False

    def read(self, uuid: str | None, reserved: int) -> int | None:
        if uuid is None or self._broken:
            return None
        now = time.monotonic()
        last = self._last.get(uuid)
        if last is not None and now - last[0] < self.FRESH_SECONDS:
            return None if last[1] is None else last[1] + reserved - last[2]
        value = self._ask_nvml(uuid)
        self._last[uuid] = (now, value, reserved)
        return value

    def _ask_nvml(self, uuid: str) -> int | None:
        from ..nvml.reader import GpuLost, NvmlReader, NvmlUnavailable
        from .gpu_memory import nvml_backend

        try:
            if self._reader is None:
                self._reader = NvmlReader(nvml_backend())
                self._reader.open()
            if uuid not in self._indices:
                found = self._reader.find(uuid)  # a GPU or a MIG device
                self._indices[uuid] = None if found is None else found["index"]
            index = self._indices[uuid]
            if index is None:
                return None
            pid = os.getpid()
            used = [p["used_memory_bytes"] for p in self._reader.processes(index) if p["pid"] == pid]
        except NvmlUnavailable:
            self._broken = True  # no driver, no permission: asking again each cell costs for nothing
            return None
        except GpuLost:
            return None
        # Not listed while CUDA runs here: NVML numbers PIDs of another namespace (a container).
        return used[0] if len(used) == 1 and isinstance(used[0], int) else None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class CellTimeline:
    """The records of this kernel's cells, newest last, and the thread that publishes them."""

    def __init__(
        self,
        path: Path | None = None,
        kernel_id: str | None = None,
        execution_count: Callable[[], Any] = lambda: None,
    ) -> None:
        self.path = path
        self.kernel_id = kernel_id
        self.execution_count = execution_count  # the shell's: at pre_run_cell, the running cell's
        self._running: dict[str, Any] | None = None  # published: the server names it if we die
        self._cells: deque[dict[str, Any]] = deque(maxlen=MAX_CELLS)
        self._encoded: deque[bytes] = deque(maxlen=MAX_CELLS)
        self._lock = threading.Lock()  # the cells, between the shell thread and the writer
        self._seq = 0
        self._started: tuple[str | None, float, float, dict[int, DeviceReading]] | None = None
        self._ranks: list[dict[str, Any]] = []
        self._uuids: dict[int, str | None] = {}
        self._process = ProcessMemory()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    # -- recording (the shell's thread) ---------------------------------------------------

    def pre_run_cell(self, info: Any = None) -> None:
        cell_id = getattr(info, "cell_id", None)  # JupyterLab's cellId, when the front end sent one
        start, started = time.time(), time.perf_counter()
        self._started = (cell_id if isinstance(cell_id, str) else None, start, started, self._readings())
        self._ranks = []
        count = self.execution_count()
        self._running = {
            "execution_count": count if isinstance(count, int) else None,
            "cell_id": cell_id if isinstance(cell_id, str) and CELL_ID.fullmatch(cell_id) else None,
            "start": start,
        }
        self._dirty.set()

    def post_run_cell(self, result: Any) -> None:
        if self._started is None:  # loaded by this very cell: it had no start
            return
        cell_id, start, started, before = self._started
        self._started = None
        self._running = None
        after = self._readings()
        end = time.time()
        count = getattr(result, "execution_count", None)
        record = cell_record(
            seq=self._seq,
            execution_count=count if isinstance(count, int) else None,
            cell_id=cell_id,
            start=start,
            end=max(start, end),
            wall_seconds=max(0.0, time.perf_counter() - started),
            error=getattr(result, "error_before_exec", None) or getattr(result, "error_in_exec", None),
            before=before,
            after=after,
            ranks=self._ranks,
        )
        self._ranks = []
        self._seq += 1
        encoded = json.dumps(record, separators=(",", ":")).encode()
        with self._lock:
            self._cells.append(record)
            self._encoded.append(encoded)
        self._dirty.set()

    def cells(self) -> list[dict[str, Any]]:
        """The recorded cells, oldest first."""
        with self._lock:
            return list(self._cells)

    def _readings(self) -> dict[int, DeviceReading]:
        """Every device this kernel's allocator uses; none before CUDA is initialised."""
        torch = torch_in_use()
        if torch is None:
            return {}
        return allocator_readings(torch, self._uuid, self._process.read)

    def _uuid(self, torch: ModuleType, index: int) -> str | None:
        if index not in self._uuids:
            self._uuids[index] = nvml_uuid(torch, index)
        return self._uuids[index]

    def note_ranks(self, figures: dict[int, list[dict[str, Any]]]) -> None:
        """What each DDP rank's allocator did in the running cell (``%%ddp``, ``%%ddp_launch``):
        the ranks measure it themselves, the magic hands it over; it joins the cell's record."""
        self._ranks = [{"rank": rank, "gpus": gpus} for rank, gpus in sorted(figures.items())][:MAX_RANKS]

    # -- publishing (the writer thread) ---------------------------------------------------

    def document(self) -> bytes:
        """The file's content: the newest cells that fit in ``MAX_BYTES``."""
        assert self.kernel_id is not None
        head = json.dumps(
            {
                "version": VERSION,
                "kernel_id": self.kernel_id,
                "pid": os.getpid(),
                "time": time.time(),
                "running": self._running,
            },
            separators=(",", ":"),
        ).encode()[:-1]
        with self._lock:
            encoded = list(self._encoded)
        size, keep = len(head) + 16, 0
        for item in reversed(encoded):
            if size + len(item) + 1 > MAX_BYTES:
                break
            size += len(item) + 1
            keep += 1
        return head + b',"cells":[' + b",".join(encoded[len(encoded) - keep :]) + b"]}"

    def publish(self) -> None:
        if self.path is not None and self.kernel_id is not None:
            path = own_path(self.path, self.kernel_id)
            write_own_file(path, self.document(), abandon=self._stop.is_set)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jupyter_gpu-timeline", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the writer and remove the file; safe to call twice (unload, then atexit)."""
        atexit.unregister(self.stop)
        self._stop.set()
        self._dirty.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        if self.path is not None and self.kernel_id is not None:
            remove_published(self.path, self.kernel_id, MAX_BYTES)
        self._process.close()

    def _run(self) -> None:
        while True:
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                self.publish()
            except Exception as error:  # the kernel must not notice a failing writer
                if not self._warned:
                    log.warning("jupyter_gpu timeline: could not write %s: %s", self.path, error)
                    self._warned = True
            self._stop.wait(WRITE_INTERVAL)


_timelines: dict[int, CellTimeline] = {}


def timeline_of(ipython: Any) -> CellTimeline | None:
    """The timeline recording this shell's cells, if jupyter_gpu is loaded in it."""
    return _timelines.get(id(ipython))


def register(ipython: Any) -> Callable[[], None]:
    """Record every cell; in a kernel, publish the records for the server."""
    found = beside_connection(cells_file_name)
    count = lambda: ipython.execution_count  # noqa: E731
    timeline = CellTimeline(*found, execution_count=count) if found else CellTimeline(execution_count=count)
    _timelines[id(ipython)] = timeline
    ipython.events.register("pre_run_cell", timeline.pre_run_cell)
    ipython.events.register("post_run_cell", timeline.post_run_cell)
    if found:
        timeline.start()

    def undo() -> None:
        ipython.events.unregister("pre_run_cell", timeline.pre_run_cell)
        ipython.events.unregister("post_run_cell", timeline.post_run_cell)
        _timelines.pop(id(ipython), None)
        timeline.stop()

    return undo
