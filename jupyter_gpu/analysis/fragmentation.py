"""PyTorch caching-allocator figures: what is allocated, cached, stranded, and what would help.

Inputs are plain data: a flattened ``torch.cuda.memory_stats()`` dict (cheap, read every second)
and the segment list of ``torch.cuda.memory._snapshot()["segments"]`` (milliseconds, read
rarely). The headline fragmentation figure is ``inactive_split_bytes / reserved_bytes``: free
bytes trapped inside segments that still hold live blocks, which ``empty_cache()`` cannot return.
With ``expandable_segments:True`` the allocator leaves its split stats at 0
by design, so the stranded bytes of expandable segments come from the snapshot instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .units import MiB, format_bytes

POOLS: tuple[str, ...] = ("large", "small")
ALLOCATED = "active_allocated"
# The C++ snapshot says "active_pending_free"; torch's docstring says "active_awaiting_free".
PENDING_FREE = frozenset({"active_pending_free", "active_awaiting_free"})
INACTIVE = "inactive"

# Expandable segments map physical memory in pages of this size per pool (allocator note
# "Expandable Segments"); only whole free pages can be unmapped by empty_cache().
EXPANDABLE_PAGE_BYTES: Mapping[str, int] = {"small": 2 * MiB, "large": 20 * MiB}

# Below this much, advice about returning or rearranging memory is noise on any modern GPU.
WORTH_BYTES = 256 * MiB
# Share of reserved memory stranded in split segments from which expandable segments pay off.
FRAGMENTATION_WORTH = 0.10
# Share of the device that other processes hold before we point at them.
OTHERS_HOLD_MOST = 0.5


def _stat(stats: Mapping[str, Any], key: str) -> int:
    value = stats.get(key, 0)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class SnapshotSummary:
    """Per-device figures that only a snapshot can give (block layout, pools, expandable)."""

    reserved_bytes: int
    allocated_bytes: int
    requested_bytes: int
    pending_free_bytes: int
    free_bytes: int
    # Free bytes that empty_cache() cannot return: free blocks of split segments, and for
    # expandable segments the parts of free blocks that do not cover whole pages.
    stranded_bytes: int
    # The part of stranded_bytes inside expandable segments, which memory_stats() leaves out.
    expandable_stranded_bytes: int
    # What empty_cache() would give back now (private pools of CUDA graphs excluded).
    releasable_bytes: int
    largest_free_block_bytes: Mapping[str, int]
    segments: int
    free_blocks: int
    expandable: bool


def _in_private_pool(segment: Mapping[str, Any]) -> bool:
    pool_id = segment.get("segment_pool_id") or (0, 0)
    return tuple(pool_id) != (0, 0)


def free_block_parts(segment: Mapping[str, Any], block: Mapping[str, Any]) -> tuple[int, int, int]:
    """A free block of an expandable segment as (sliver before, whole pages, sliver after).

    Pages count from the start of the mapped range the snapshot reports as the segment; only
    the whole pages can be unmapped. A block of an ordinary segment is all "whole".
    """
    size = block["size"]
    if not segment.get("is_expandable"):
        return 0, size, 0
    page = EXPANDABLE_PAGE_BYTES.get(segment.get("segment_type", "large"), EXPANDABLE_PAGE_BYTES["large"])
    start = block["address"] - segment["address"]
    first_page = -(-start // page) * page
    end_page = (start + size) // page * page
    if end_page <= first_page:
        return size, 0, 0
    return first_page - start, end_page - first_page, start + size - end_page


def summarize_snapshot(segments: Iterable[Mapping[str, Any]], device: int | None = None) -> SnapshotSummary:
    """Summarise snapshot segments of one device (all devices when ``device`` is None)."""
    reserved = allocated = requested = pending = free = 0
    stranded = expandable_stranded = releasable = free_blocks = count = 0
    largest = {pool: 0 for pool in POOLS}
    expandable = False
    for segment in segments:
        if device is not None and segment.get("device", 0) != device:
            continue
        count += 1
        reserved += segment["total_size"]
        blocks = segment["blocks"]
        pool = segment.get("segment_type", "large")
        is_expandable = bool(segment.get("is_expandable", False))
        expandable = expandable or is_expandable
        private = _in_private_pool(segment)
        for block in blocks:
            size, state = block["size"], block["state"]
            if state == ALLOCATED:
                allocated += size
                requested += block.get("requested_size", size)
            elif state in PENDING_FREE:
                pending += size
            elif state == INACTIVE:
                free += size
                free_blocks += 1
                largest[pool] = max(largest[pool], size)
                if is_expandable:
                    whole = free_block_parts(segment, block)[1]
                    expandable_stranded += size - whole
                    stranded += size - whole
                    if not private:
                        releasable += whole
                elif len(blocks) > 1:
                    stranded += size
                elif not private:
                    releasable += size
    return SnapshotSummary(
        reserved_bytes=reserved,
        allocated_bytes=allocated,
        requested_bytes=requested,
        pending_free_bytes=pending,
        free_bytes=free,
        stranded_bytes=stranded,
        expandable_stranded_bytes=expandable_stranded,
        releasable_bytes=releasable,
        largest_free_block_bytes=largest,
        segments=count,
        free_blocks=free_blocks,
        expandable=expandable,
    )


@dataclass(frozen=True)
class AllocatorFigures:
    """One device's allocator figures from memory_stats(), corrected by a snapshot if given."""

    allocated_bytes: int
    reserved_bytes: int
    active_bytes: int
    requested_bytes: int
    # Stats' inactive_split_bytes plus, under expandable segments, the snapshot's stranded bytes.
    inactive_split_bytes: int
    num_alloc_retries: int
    num_ooms: int
    peak_allocated_bytes: int
    snapshot: SnapshotSummary | None = None

    @property
    def reserved_unallocated_bytes(self) -> int:
        """The OOM message's "reserved by PyTorch but unallocated"."""
        return self.reserved_bytes - self.allocated_bytes

    @property
    def fragmentation(self) -> float | None:
        """Share of reserved memory stranded in split segments; None when nothing is reserved."""
        if self.reserved_bytes <= 0:
            return None
        return self.inactive_split_bytes / self.reserved_bytes

    @property
    def rounding_waste_bytes(self) -> int:
        """Bytes lost to block rounding: not fragmentation, and not recoverable by the cache."""
        return max(0, self.allocated_bytes - self.requested_bytes)

    @property
    def releasable_bytes(self) -> int:
        """What ``torch.cuda.empty_cache()`` would return: exact with a snapshot, else estimated.

        Without a snapshot: reserved minus active (live or awaiting stream events) minus the
        stranded bytes, which is exact for the native allocator without expandable segments.
        """
        if self.snapshot is not None:
            return self.snapshot.releasable_bytes
        return max(0, self.reserved_bytes - self.active_bytes - self.inactive_split_bytes)

    @property
    def expandable(self) -> bool:
        return self.snapshot is not None and self.snapshot.expandable


def allocator_figures(stats: Mapping[str, Any], snapshot: SnapshotSummary | None = None) -> AllocatorFigures:
    """Combine a flattened ``memory_stats()`` dict with an optional snapshot summary."""
    inactive_split = _stat(stats, "inactive_split_bytes.all.current")
    if snapshot is not None:
        inactive_split += snapshot.expandable_stranded_bytes
    return AllocatorFigures(
        allocated_bytes=_stat(stats, "allocated_bytes.all.current"),
        reserved_bytes=_stat(stats, "reserved_bytes.all.current"),
        active_bytes=_stat(stats, "active_bytes.all.current"),
        requested_bytes=_stat(stats, "requested_bytes.all.current"),
        inactive_split_bytes=inactive_split,
        num_alloc_retries=_stat(stats, "num_alloc_retries"),
        num_ooms=_stat(stats, "num_ooms"),
        peak_allocated_bytes=_stat(stats, "allocated_bytes.all.peak"),
        snapshot=snapshot,
    )


def expandable_segments_configured(environ: Mapping[str, str]) -> bool:
    """Whether the allocator config in the environment turns expandable segments on."""
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        for option in environ.get(name, "").split(","):
            key, _, value = option.partition(":")
            if key.strip() == "expandable_segments":
                return value.strip().lower() in ("true", "1")
    return False


@dataclass(frozen=True)
class Advice:
    """One concrete suggestion; ``bytes`` is the amount it concerns, when there is one."""

    kind: str
    message: str
    bytes: int | None = None


def advise(
    figures: AllocatorFigures,
    *,
    expandable_enabled: bool = False,
    device_total_bytes: int | None = None,
    other_processes_bytes: int | None = None,
) -> list[Advice]:
    """Suggestions that apply to these figures, most actionable first.

    ``other_processes_bytes`` is what NVML says every other process holds on this device.
    """
    advice: list[Advice] = []
    stranded = figures.inactive_split_bytes
    ratio = figures.fragmentation or 0.0
    under_pressure = figures.num_ooms > 0 or figures.num_alloc_retries > 0
    if (
        not (expandable_enabled or figures.expandable)
        and stranded >= (64 * MiB if under_pressure else WORTH_BYTES)
        and (ratio >= FRAGMENTATION_WORTH or under_pressure)
    ):
        advice.append(
            Advice(
                "expandable_segments",
                f"{format_bytes(stranded)} ({ratio:.0%} of reserved) is free but stranded in "
                "segments that still hold live tensors; neither empty_cache() nor a new "
                "allocation larger than the holes can use it. Restart the kernel with "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch uses CUDA "
                "(e.g. `%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` as the first "
                "cell): segments then grow in place instead of leaving slivers.",
                stranded,
            )
        )
    if figures.num_alloc_retries > 0:
        advice.append(
            Advice(
                "retries",
                f"The allocator failed cudaMalloc {figures.num_alloc_retries} time(s) and had "
                "to flush its whole cache and retry; each retry synchronises the device. "
                "Memory is at its limit: smaller batches, activation checkpointing or bf16 help.",
                None,
            )
        )
    releasable = figures.releasable_bytes
    if releasable >= WORTH_BYTES:
        advice.append(
            Advice(
                "empty_cache",
                f"torch.cuda.empty_cache() would return {format_bytes(releasable)} of cached, "
                "entirely free segments to the driver. This kernel reuses them anyway; it "
                "helps only other processes or non-PyTorch allocations on this GPU.",
                releasable,
            )
        )
    if (
        device_total_bytes
        and other_processes_bytes is not None
        and other_processes_bytes >= OTHERS_HOLD_MOST * device_total_bytes
    ):
        advice.append(
            Advice(
                "other_processes",
                f"Other processes hold {format_bytes(other_processes_bytes)} of this GPU's "
                f"{format_bytes(device_total_bytes)}; free memory there, or use another GPU.",
                other_processes_bytes,
            )
        )
    return advice
