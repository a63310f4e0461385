"""Which samples of a long history a page load needs (pure functions, no server).

A first telemetry reply carries the whole history; with 8 GPUs and an hour of it that was tens of
megabytes per page load. The charts draw the recent minutes at full rate, so those are all kept;
older samples are thinned to the newest of each ``bucket_seconds`` (real samples, never averaged:
a short peak between two kept samples is not drawn). The history is cut into blocks of
``block_seconds`` aligned to the epoch, each kept whole or thinned whole, so that a server can
encode and compress each block once and reuse it for every later reply (server/full_history.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

# The last ten minutes (the charts' default window) at the sampler's own rate.
RECENT_SECONDS = 600.0
# Older samples: one per 3 s. Consecutive kept samples are then at most 3 s plus one interval
# apart, under the charts' gap threshold (max(3 x interval, 5 s)), so lines do not break there.
BUCKET_SECONDS = 3.0
# Blocks of a minute (a whole number of buckets): up to a minute more than RECENT_SECONDS is kept
# at full rate, and a block that repeats the one before's process lists sends them once more.
BLOCK_SECONDS = 60.0


def block_of(t: float, block_seconds: float = BLOCK_SECONDS) -> int:
    """The number of the block holding time ``t``."""
    return math.floor(t / block_seconds)


def thinned_before(
    newest: float, *, recent_seconds: float = RECENT_SECONDS, block_seconds: float = BLOCK_SECONDS
) -> float:
    """Samples older than this are thinned: the start of the block ``recent_seconds`` before ``newest``."""
    return block_of(newest - recent_seconds, block_seconds) * block_seconds


def newest_per_bucket(times: Sequence[float], bucket_seconds: float = BUCKET_SECONDS) -> list[int]:
    """Indices of the newest sample of each ``bucket_seconds``-wide bucket (aligned to the epoch,
    so a sample kept in one reply is kept in the next while it stays in the history)."""
    kept: list[int] = []
    bucket = None
    for i, t in enumerate(times):
        this = math.floor(t / bucket_seconds)
        if kept and this == bucket:
            kept[-1] = i  # a newer sample of the same bucket replaces the one kept
        else:
            kept.append(i)
        bucket = this
    return kept


def blocks(
    times: Sequence[float],
    *,
    recent_seconds: float = RECENT_SECONDS,
    block_seconds: float = BLOCK_SECONDS,
) -> list[tuple[int, int, bool]]:
    """The blocks of a history, oldest first: for each, ``(start, end, thinned)``, the indices of
    its samples (``times[start:end]``, ``times`` ascending) and whether it is older than the
    recent window (thinned_before the newest sample)."""
    if not times:
        return []
    cutoff = thinned_before(times[-1], recent_seconds=recent_seconds, block_seconds=block_seconds)
    spans = []
    start = 0
    while start < len(times):
        end_t = (block_of(times[start], block_seconds) + 1) * block_seconds
        end = bisect.bisect_left(times, end_t, start + 1)
        spans.append((start, end, end_t <= cutoff))
        start = end
    return spans


def thin(
    times: Sequence[float],
    *,
    recent_seconds: float = RECENT_SECONDS,
    bucket_seconds: float = BUCKET_SECONDS,
    block_seconds: float = BLOCK_SECONDS,
) -> list[int]:
    """Indices of the samples to keep, ascending; ``times`` ascending (oldest first): every sample
    of the blocks not thinned, the newest of each bucket of the others (``block_seconds`` is a
    multiple of ``bucket_seconds``, so no bucket straddles two blocks)."""
    kept: list[int] = []
    for start, end, thinned in blocks(times, recent_seconds=recent_seconds, block_seconds=block_seconds):
        if thinned:
            kept += [start + i for i in newest_per_bucket(times[start:end], bucket_seconds)]
        else:
            kept += range(start, end)
    return kept
