"""Kernel agent: publishes this kernel's PyTorch allocator figures for the Jupyter server.

The shell channel is busy while a cell runs, so a daemon thread pushes instead of being asked:
about once a second it writes ``memory_stats()`` figures per device, and every few seconds the
figures only a snapshot gives (largest free block per pool, segment count, expandable segments),
to ``jupyter_gpu-kernel-<kernel id>.json`` beside the kernel's connection file (the server's
runtime dir), or to its private name while another user's file holds that name
(``runtime_dir.own_path``). Writes are atomic (temp file + ``os.replace``) and mode 0600.

It never imports torch and never initialises CUDA: it reports only once the
user's code has imported torch and CUDA is initialised; until then ``cuda_in_use`` is false.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from traitlets import Enum, Float, default
from traitlets.config import Configurable

from ..analysis.fragmentation import SnapshotSummary, allocator_figures, summarize_snapshot
from ..analysis.stats_file import MAX_BYTES, VERSION, device_record, file_name
from ..runtime_dir import beside_connection, own_path, remove_published, write_own_file
from ..torch_state import nvml_uuid, snapshot_segments, torch_in_use
from .nvml_match import NvmlMatcher

log = logging.getLogger(__name__)

# Keep periodic snapshots under this share of wall time, whatever `snapshot_interval` says:
# a snapshot holds the allocator lock and the GIL for milliseconds per thousand blocks.
SNAPSHOT_MAX_DUTY = 0.001
SNAPSHOT_RETRY = 60.0  # seconds before trying again after a snapshot failed


class KernelAgent(Configurable):
    """Configurable from IPython config, e.g. ``c.KernelAgent.interval = 2.0``."""

    interval = Float(1.0, help="Seconds between writes of the allocator figures.").tag(config=True)
    snapshot_interval = Float(
        5.0,
        help="Seconds between allocator snapshots (largest free block, segments). Stretched "
        "automatically when a snapshot is slow, so that snapshots take at most 0.1% of the time.",
    ).tag(config=True)

    warmup = Enum(
        ["off", "background"],
        help='"background": once the notebook has imported torch, warm up what it uses on a '
        "background thread (as %gpu_warmup --background), where a GPU is usable; never in a kernel "
        'that has not imported torch. "off": only when asked. Default: the kernel\'s '
        "JUPYTER_GPU_WARMUP, else off.",
    ).tag(config=True)

    @default("warmup")
    def _warmup_from_environment(self) -> str:
        value = os.environ.get("JUPYTER_GPU_WARMUP", "off")
        if value not in ("off", "background"):
            log.warning("jupyter_gpu: JUPYTER_GPU_WARMUP=%r is neither off nor background: off", value)
            return "off"
        return value

    def __init__(
        self, path: Path, kernel_id: str, clock: Callable[[], float] = time.time, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.kernel_id = kernel_id
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._uuids: dict[int, str | None] = {}
        self._snapshot: dict[int, SnapshotSummary] = {}
        self._snapshot_time: float | None = None
        self._next_snapshot = 0.0
        self._warned = False
        self._nvml = NvmlMatcher()  # which NVML process is this kernel, across PID namespaces

    # -- what is published ---------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        """The file's content now; takes a snapshot when one is due."""
        torch = torch_in_use()
        devices: list[dict[str, Any]] = []
        if torch is not None:
            now = time.monotonic()
            if now >= self._next_snapshot:
                self._refresh_snapshot(torch, now)
            for index in range(torch.cuda.device_count()):
                stats = torch.cuda.memory_stats(index)
                if not _has_used(stats):
                    continue
                figures = allocator_figures(stats, self._snapshot.get(index))
                devices.append(device_record(index, self._uuid(torch, index), figures, self._snapshot_time))
        used = next(
            ((d["uuid"], d["reserved_bytes"]) for d in devices if d["uuid"] and d["reserved_bytes"]), None
        )
        self._nvml.tick(torch, used)
        return {
            "version": VERSION,
            "kernel_id": self.kernel_id,
            "pid": os.getpid(),
            "time": self.clock(),
            "cuda_in_use": torch is not None,
            "devices": devices,
            **self._nvml.fields(),
        }

    @property
    def nvml_pid(self) -> int | None:
        """NVML's PID for this kernel when it differs from its own (another PID namespace)."""
        identity = self._nvml.identity
        return identity.pid if identity.state == "matched" else None

    def _uuid(self, torch: ModuleType, index: int) -> str | None:
        if index not in self._uuids:
            self._uuids[index] = nvml_uuid(torch, index)
        return self._uuids[index]

    def _refresh_snapshot(self, torch: ModuleType, started: float) -> None:
        try:
            segments = snapshot_segments(torch)
        except Exception as error:  # e.g. pytorch#174044; the stats still get published
            self._warn("snapshot failed", error)
            self._next_snapshot = started + SNAPSHOT_RETRY
            return
        by_device: dict[int, list[dict[str, Any]]] = {}
        for segment in segments:
            by_device.setdefault(segment.get("device", 0), []).append(segment)
        # Every device, so that one whose cache was emptied reads 0 segments, not "unknown".
        self._snapshot = {
            d: summarize_snapshot(by_device.get(d, [])) for d in range(torch.cuda.device_count())
        }
        self._snapshot_time = self.clock()
        cost = time.monotonic() - started  # the snapshot and walking its blocks
        self._next_snapshot = started + max(self.snapshot_interval, cost / SNAPSHOT_MAX_DUTY)

    # -- writing -------------------------------------------------------------------------

    def publish(self) -> None:
        data = json.dumps(self.figures(), separators=(",", ":")).encode()
        write_own_file(own_path(self.path, self.kernel_id), data, abandon=self._stop.is_set)

    # -- thread --------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jupyter_gpu-agent", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the thread and remove the file; safe to call twice (unload, then atexit)."""
        atexit.unregister(self.stop)
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        remove_published(self.path, self.kernel_id, MAX_BYTES)
        self._nvml.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish()
            except Exception as error:  # the kernel must not notice a failing agent
                self._warn(f"could not publish to {self.path}", error)
            self._stop.wait(self.interval)

    def _warn(self, what: str, error: Exception) -> None:
        """Once per agent: a broken setup would otherwise log every second."""
        if not self._warned:
            log.warning("jupyter_gpu agent: %s: %s", what, error)
            self._warned = True


def _has_used(stats: dict[str, Any]) -> bool:
    """Devices whose allocator never reserved memory have nothing to report."""
    return bool(
        stats.get("reserved_bytes.all.peak")
        or stats.get("reserved_bytes.all.allocated")
        or stats.get("num_ooms")
    )


_running: KernelAgent | None = None  # this kernel's agent, while it runs


def own_nvml_pid() -> int | None:
    """This kernel's process as NVML numbers it, once the agent matched it in another PID
    namespace: the out-of-memory explanation and ``%gpu_mem`` count it as this kernel's."""
    agent = _running
    return agent.nvml_pid if agent is not None else None


def register(ipython: Any) -> Callable[[], None]:
    """Start the agent in a kernel; outside a kernel there is no server to tell."""
    global _running
    found = beside_connection(file_name)
    if found is None:
        return lambda: None
    agent = KernelAgent(*found, parent=ipython)
    agent.start()
    _running = agent
    cancel_warmup = None
    if agent.warmup == "background":
        from .warmup_magic import warm_after_torch_import

        cancel_warmup = warm_after_torch_import(ipython)

    def stop() -> None:
        global _running
        if cancel_warmup is not None:
            cancel_warmup()
        agent.stop()
        if _running is agent:
            _running = None

    return stop
