"""The kernel agent's side of attribution across PID namespaces: reads NVML's process lists for
``analysis/nvml_identity.py`` on the agent's thread, once per publication.

NVML is asked only while torch is imported: before the context, for the lists the context will
be compared with; after it, for the GPU the allocator uses. It never initialises CUDA (NVML is
the driver's management library, not the CUDA runtime). Once the kernel is found in NVML's list
under its own PID, it stops asking: the server joins such a kernel by itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..analysis.nvml_identity import NvmlIdentity
from ..nvml.reader import GpuLost, NvmlReader, NvmlUnavailable
from .gpu_memory import nvml_backend


class NvmlMatcher:
    """One per kernel agent; ``fields()`` are what its stats file says about the match."""

    def __init__(self, reader: Callable[[], NvmlReader] = lambda: NvmlReader(nvml_backend())) -> None:
        self._new_reader = reader
        self._reader: NvmlReader | None = None
        self._leaves: list[int] | None = None  # the devices processes run on, once listed
        self._index: dict[str, int | None] = {}  # uuid -> NVML index
        self._before: dict[int, set[int]] = {}  # NVML index -> pids before the context
        self.identity = NvmlIdentity(os.getpid())
        self._unavailable = False  # NVML cannot be used here: asking again costs for nothing

    def _open(self) -> NvmlReader | None:
        if self._reader is None and not self._unavailable:
            try:
                reader = self._new_reader()
                reader.open()
                self._reader = reader
            except NvmlUnavailable:
                self._unavailable = True
        return self._reader

    def _leaf_devices(self, reader: NvmlReader) -> list[int]:
        """Each GPU not split into MIG devices, and each MIG device: where processes run."""
        if self._leaves is None:
            infos = [info for info, _ in reader.devices()]
            split = {info["mig"]["parent_index"] for info in infos if info["mig"] is not None}
            self._leaves = [info["index"] for info in infos if info["index"] not in split]
        return self._leaves

    def _pids(self, index: int) -> dict[int, int]:
        assert self._reader is not None
        return {
            p["pid"]: p["used_memory_bytes"]
            for p in self._reader.processes(index)
            if isinstance(p["pid"], int) and isinstance(p["used_memory_bytes"], int)
        }

    def tick(self, torch: ModuleType | None, device: tuple[str, int] | None) -> None:
        """``torch`` once CUDA is in use; ``device``: the (uuid, reserved bytes) of the GPU its
        allocator uses, when it reserved anything."""
        if self.identity.state == "same_namespace" or "torch" not in sys.modules:
            return
        reader = self._open()
        if reader is None:
            return
        try:
            if torch is None:  # imported, no context yet: remember who is there before it
                self._before = {i: set(self._pids(i)) for i in self._leaf_devices(reader)}
                return
            if device is None:
                return
            uuid, reserved = device
            if uuid not in self._index:
                found = reader.find(uuid)  # a GPU or a MIG device
                self._index[uuid] = None if found is None else found["index"]
            index = self._index[uuid]
            if index is None:
                return
            if index in self._before:
                self.identity.before_context(self._before.pop(index))
                self._before.clear()
            self.identity.observe(self._pids(index), reserved)
        except (GpuLost, NvmlUnavailable):
            return

    def fields(self) -> dict[str, Any]:
        """``nvml_pid`` (this kernel's process as NVML numbers it, once known) and ``nvml_match``."""
        return {"nvml_pid": self.identity.pid, "nvml_match": self.identity.state}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
