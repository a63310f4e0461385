"""A stand-in ``torch`` whose CUDA allocator replays the H200 fixtures, for CPU-only machines:
in the test's own process (``install``), or in a real kernel (the cell ``FAKE_TORCH_THEN_LOAD``).

Only the calls jupyter_gpu's kernel side makes exist; each call is counted so that tests can
assert what was (not) called, e.g. that nothing initialising CUDA ran before the user did.
"""

from __future__ import annotations

import json
import sys
import types
from collections import Counter
from typing import TYPE_CHECKING, Any

from support.paths import FIXTURES, TESTS

if TYPE_CHECKING:  # benchmarks/kernel_agent.py and kernels use FakeCuda without pytest
    import pytest

UUID0 = "2da622ba-bcdc-9f07-006d-4b42150c85b5"
UUID1 = "d57917b3-7a1d-3f45-579e-d0c856ed9f9d"
TOTAL = 150_754_820_096
# What torch says when an allocation on GPU 0 fails (the message of its OutOfMemoryError).
OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of "
    "which 1.00 GiB is free. Including non-PyTorch memory, this process has 3.00 GiB memory in use. "
    "Of the allocated memory 1.17 GiB is allocated by PyTorch, and 1.32 GiB is reserved by PyTorch "
    "but unallocated."
)
# What jupyter_gpu asks of torch.cuda (FAKE_CUDA_IN_TORCH answers them).
QUERIES = (
    "is_initialized",
    "device_count",
    "current_device",
    "get_device_properties",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "mem_get_info",
    "memory_snapshot",
)
# A notebook cell: this stand-in becomes the kernel's torch (the H200 allocator figures), then
# jupyter_gpu loads, so that the kernel's agent (the real one) publishes those figures.
FAKE_TORCH_THEN_LOAD = f"""
import sys, types
sys.path.insert(0, {str(TESTS)!r})
from support import fake_torch as _fake_torch
torch = types.ModuleType("torch")
torch.cuda, torch.OutOfMemoryError = _fake_torch.FakeCuda(), _fake_torch.OutOfMemoryError
sys.modules["torch"] = torch
%load_ext jupyter_gpu
"""
# A notebook cell: the kernel's real (CPU) torch, whose CUDA queries the stand-in answers as a
# kernel that initialised CUDA on the H200 would (``torch.cuda.is_available()`` stays False, so
# torch itself runs on the CPU): for what jupyter_gpu reads of torch, with torch's profiler real.
FAKE_CUDA_IN_TORCH = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from support import fake_torch as _fake_torch
import torch
_fake_cuda = _fake_torch.FakeCuda()
for _name in {QUERIES!r}:
    setattr(torch.cuda, _name, getattr(_fake_cuda, _name))
"""


def fixture_stats() -> dict[str, Any]:
    return json.loads((FIXTURES / "torch_memory_stats_fragmented.json").read_text())


def fixture_segments() -> list[dict[str, Any]]:
    return json.loads((FIXTURES / "torch_memory_snapshot_fragmented.json").read_text())


class OutOfMemoryError(RuntimeError):
    """Named and placed like torch's, which is what the OOM hook recognises."""


OutOfMemoryError.__module__ = "torch"


class FakeCuda:
    def __init__(self, *, initialized: bool = True, include_traces: bool = True) -> None:
        self.initialized = initialized
        self.calls: Counter[str] = Counter()
        self.stats = {0: fixture_stats(), 1: {k: 0 for k in fixture_stats()}}
        self.segments = fixture_segments()
        self.snapshot_error: Exception | None = None
        self.free = {0: TOTAL - 3_222_077_440, 1: TOTAL - 3_407_872}
        self.uuids = [UUID0, UUID1]  # a test may give a device another's, e.g. a MIG slice's
        if include_traces:
            self.memory_snapshot = self._memory_snapshot
        else:
            self.memory_snapshot = self._legacy_memory_snapshot
        self.memory = types.SimpleNamespace(_snapshot=self._snapshot)

    def is_initialized(self) -> bool:
        self.calls["is_initialized"] += 1
        return self.initialized

    def device_count(self) -> int:
        self.calls["device_count"] += 1
        return 2

    def current_device(self) -> int:
        self.calls["current_device"] += 1
        return 0

    def memory_stats(self, device: int = 0) -> dict[str, Any]:
        self.calls["memory_stats"] += 1
        return dict(self.stats[device]) if self.initialized else {}

    def memory_stats_as_nested_dict(self, device: int = 0) -> dict[str, Any]:
        """torch's own unflattening of the same figures: "a.b.c" -> {"a": {"b": {"c": ...}}}."""
        self.calls["memory_stats_as_nested_dict"] += 1
        nested: dict[str, Any] = {}
        for key, value in (self.stats[device] if self.initialized else {}).items():
            *path, last = key.split(".")
            node = nested
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        return nested

    def get_device_properties(self, device: int) -> types.SimpleNamespace:
        self.calls["get_device_properties"] += 1
        return types.SimpleNamespace(uuid=self.uuids[device], name="NVIDIA H200", total_memory=TOTAL)

    def mem_get_info(self, device: int = 0) -> tuple[int, int]:
        self.calls["mem_get_info"] += 1
        return self.free[device], TOTAL

    def _segments(self) -> list[dict[str, Any]]:
        if self.snapshot_error is not None:
            raise self.snapshot_error
        return self.segments

    def _memory_snapshot(self, mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
        self.calls[f"memory_snapshot(include_traces={include_traces})"] += 1
        return self._segments()

    def _legacy_memory_snapshot(self, mempool_id: Any = None) -> list[dict[str, Any]]:
        self.calls["memory_snapshot(legacy)"] += 1
        return self._segments()

    def _snapshot(self, device: Any = None) -> dict[str, Any]:
        self.calls["_snapshot"] += 1
        return {"segments": self._segments(), "device_traces": []}


def install(monkeypatch: pytest.MonkeyPatch, cuda: FakeCuda) -> types.ModuleType:
    """Put a fake ``torch`` into ``sys.modules`` for this test only."""
    torch = types.ModuleType("torch")
    torch.cuda = cuda  # type: ignore[attr-defined]
    torch.OutOfMemoryError = OutOfMemoryError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch
