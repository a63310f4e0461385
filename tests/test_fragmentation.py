"""Allocator arithmetic against real H200 readings (tests/fixtures: captured from torch 2.11 on an H200)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_gpu.analysis.fragmentation import (
    advise,
    allocator_figures,
    expandable_segments_configured,
    summarize_snapshot,
)
from jupyter_gpu.analysis.oom_message import parse_oom_message
from jupyter_gpu.analysis.units import MiB, format_bytes

FIXTURES = Path(__file__).parent / "fixtures"

# The totals the fixture README states for the capture.
RESERVED = 2_669_674_496
ALLOCATED = 1_259_148_288
INACTIVE_SPLIT = 399_698_944
FREE_CACHED = 1_410_526_208
LARGEST_FREE = 23_068_672


@pytest.fixture(scope="module")
def segments() -> list[dict]:
    return json.loads((FIXTURES / "torch_memory_snapshot_fragmented.json").read_text())


@pytest.fixture(scope="module")
def stats() -> dict:
    return json.loads((FIXTURES / "torch_memory_stats_fragmented.json").read_text())


def test_snapshot_reproduces_readme_totals(segments: list[dict]) -> None:
    s = summarize_snapshot(segments, device=0)
    assert s.segments == 144
    assert s.reserved_bytes == RESERVED
    assert s.allocated_bytes == ALLOCATED
    assert s.free_bytes == FREE_CACHED
    assert s.free_blocks == 244
    assert max(s.largest_free_block_bytes.values()) == LARGEST_FREE
    assert s.largest_free_block_bytes == {"large": LARGEST_FREE, "small": 1_135_616}
    assert s.pending_free_bytes == 0
    assert not s.expandable


def test_snapshot_stranded_equals_stats_inactive_split(segments: list[dict], stats: dict) -> None:
    s = summarize_snapshot(segments)
    assert s.stranded_bytes == INACTIVE_SPLIT == stats["inactive_split_bytes.all.current"]
    assert s.requested_bytes == stats["requested_bytes.all.current"]
    # Everything free is either stranded or in a wholly free segment empty_cache() returns.
    assert s.releasable_bytes == FREE_CACHED - INACTIVE_SPLIT
    assert s.expandable_stranded_bytes == 0


def test_snapshot_of_other_device_is_empty(segments: list[dict]) -> None:
    s = summarize_snapshot(segments, device=1)
    assert (s.segments, s.reserved_bytes, s.free_blocks) == (0, 0, 0)
    assert s.largest_free_block_bytes == {"large": 0, "small": 0}


def test_stats_figures(stats: dict) -> None:
    f = allocator_figures(stats)
    assert f.reserved_bytes == RESERVED
    assert f.allocated_bytes == ALLOCATED
    assert f.active_bytes == ALLOCATED
    assert f.inactive_split_bytes == INACTIVE_SPLIT
    assert f.reserved_unallocated_bytes == FREE_CACHED
    assert f.fragmentation == pytest.approx(INACTIVE_SPLIT / RESERVED)
    assert f.rounding_waste_bytes == ALLOCATED - 1_238_401_337
    assert (f.num_alloc_retries, f.num_ooms) == (0, 0)
    assert f.peak_allocated_bytes == stats["allocated_bytes.all.peak"]
    # Without a snapshot the estimate of what empty_cache() returns is exact here.
    assert f.releasable_bytes == FREE_CACHED - INACTIVE_SPLIT


def test_stats_and_snapshot_agree(stats: dict, segments: list[dict]) -> None:
    with_snapshot = allocator_figures(stats, summarize_snapshot(segments, 0))
    assert with_snapshot.inactive_split_bytes == INACTIVE_SPLIT
    assert with_snapshot.releasable_bytes == allocator_figures(stats).releasable_bytes


def test_empty_stats_mean_nothing_reserved() -> None:
    f = allocator_figures({})
    assert f.reserved_bytes == 0
    assert f.fragmentation is None
    assert advise(f) == []


def _expandable_segment() -> dict:
    """One 100 MiB mapped range of a large-pool expandable segment (20 MiB pages)."""
    base = 1 << 40
    layout = [(10, "active_allocated"), (50, "inactive"), (30, "active_allocated"), (10, "inactive")]
    blocks, offset = [], 0
    for mib, state in layout:
        blocks.append(
            {"address": base + offset * MiB, "size": mib * MiB, "requested_size": mib * MiB, "state": state}
        )
        offset += mib
    return {
        "device": 0,
        "address": base,
        "total_size": 100 * MiB,
        "segment_type": "large",
        "segment_pool_id": [0, 0],
        "is_expandable": True,
        "blocks": blocks,
    }


def test_expandable_segments_stranded_from_snapshot() -> None:
    s = summarize_snapshot([_expandable_segment()], 0)
    # Free 10..60 MiB holds the whole pages 20..60 (releasable); 10..20 and 90..100 are slivers.
    assert s.releasable_bytes == 40 * MiB
    assert s.stranded_bytes == s.expandable_stranded_bytes == 20 * MiB
    assert s.expandable
    # The allocator's stats say 0 for split bytes under expandable segments: the snapshot fills in.
    stats = {
        "reserved_bytes.all.current": 100 * MiB,
        "allocated_bytes.all.current": 40 * MiB,
        "active_bytes.all.current": 40 * MiB,
        "inactive_split_bytes.all.current": 0,
    }
    f = allocator_figures(stats, s)
    assert f.inactive_split_bytes == 20 * MiB
    assert f.fragmentation == pytest.approx(0.2)
    assert f.releasable_bytes == 40 * MiB
    assert "expandable_segments" not in {a.kind for a in advise(f)}


def test_advice_on_fixture(stats: dict, segments: list[dict]) -> None:
    f = allocator_figures(stats, summarize_snapshot(segments, 0))
    kinds = [a.kind for a in advise(f)]
    assert kinds == ["expandable_segments", "empty_cache"]
    empty = next(a for a in advise(f) if a.kind == "empty_cache")
    assert empty.bytes == FREE_CACHED - INACTIVE_SPLIT
    assert format_bytes(empty.bytes) in empty.message
    assert "expandable_segments" not in [a.kind for a in advise(f, expandable_enabled=True)]


def test_advice_other_processes_and_retries(stats: dict) -> None:
    f = allocator_figures({**stats, "num_alloc_retries": 3, "num_ooms": 1})
    total = 150_754_820_096
    kinds = [a.kind for a in advise(f, device_total_bytes=total, other_processes_bytes=total // 2)]
    assert kinds == ["expandable_segments", "retries", "empty_cache", "other_processes"]
    assert "other_processes" not in [
        a.kind for a in advise(f, device_total_bytes=total, other_processes_bytes=total // 10)
    ]


def test_small_fragmentation_gives_no_advice() -> None:
    stats = {
        "reserved_bytes.all.current": 8 * 1024 * MiB,
        "allocated_bytes.all.current": 8000 * MiB,
        "active_bytes.all.current": 8000 * MiB,
        "inactive_split_bytes.all.current": 100 * MiB,
    }
    assert advise(allocator_figures(stats)) == []


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
        ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:128, expandable_segments:true"}, True),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, False),
        (
            {
                "PYTORCH_ALLOC_CONF": "expandable_segments:False",
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            },
            False,
        ),
    ],
)
def test_expandable_segments_configured(environ: dict, expected: bool) -> None:
    assert expandable_segments_configured(environ) is expected


# The exact text torch 2.11 printed on an H200.
H200_OOM = (
    "CUDA out of memory. Tried to allocate 38.00 MiB. GPU 0 has a total capacity of 139.80 GiB of "
    "which 136.51 GiB is free. Including non-PyTorch memory, this process has 3.29 GiB memory in "
    "use. 2.80 GiB allowed; Of the allocated memory 2.69 GiB is allocated by PyTorch, and 91.00 MiB "
    "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)


def test_parse_oom_message() -> None:
    m = parse_oom_message(H200_OOM)
    assert m is not None
    assert m.requested_bytes == 38 * MiB
    assert m.device == 0
    assert m.total_bytes == int(139.80 * 1024**3)
    assert m.free_bytes == int(136.51 * 1024**3)
    assert m.process_bytes == int(3.29 * 1024**3)
    assert m.allowed_bytes == int(2.80 * 1024**3)
    assert m.pytorch_allocated_bytes == int(2.69 * 1024**3)
    assert m.reserved_unallocated_bytes == 91 * MiB


def test_parse_oom_message_partial_and_foreign() -> None:
    assert parse_oom_message("MPS backend out of memory") is None
    m = parse_oom_message("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert m is not None and m.requested_bytes == 2 * 1024**3 and m.device is None
