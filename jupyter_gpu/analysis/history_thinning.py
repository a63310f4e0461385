"""Which samples of a long history a page load needs (pure functions, no server).

A first telemetry reply carries the whole history; with 8 GPUs and an hour of it that was tens of
megabytes per page load. The charts draw the recent minutes at full rate, so those are all kept;
older samples are thinned to the newest of each ``bucket_seconds`` (real samples, never averaged:
a short peak between two kept samples is not drawn). ``repeats`` marks the samples whose process
lists equal those of the kept sample before them, which a reply may then leave out.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

# The last ten minutes (the charts' default window) at the sampler's own rate.
RECENT_SECONDS = 600.0
# Older samples: one per 3 s. Consecutive kept samples are then at most 3 s plus one interval
# apart, under the charts' gap threshold (max(3 x interval, 5 s)), so lines do not break there.
BUCKET_SECONDS = 3.0


def thin(
    times: Sequence[float],
    *,
    recent_seconds: float = RECENT_SECONDS,
    bucket_seconds: float = BUCKET_SECONDS,
) -> list[int]:
    """Indices of the samples to keep, ascending; ``times`` ascending (oldest first).

    Every sample within ``recent_seconds`` of the newest is kept; before that, the newest sample of
    each ``bucket_seconds``-wide bucket (buckets aligned to the epoch, so a sample kept in one
    reply is kept in the next while it stays in the history).
    """
    if not times:
        return []
    cutoff = times[-1] - recent_seconds
    kept: list[int] = []
    bucket = None
    for i, t in enumerate(times):
        if t >= cutoff:
            return kept + list(range(i, len(times)))
        this = math.floor(t / bucket_seconds)
        if kept and this == bucket:
            kept[-1] = i  # a newer sample of the same bucket replaces the one kept
        else:
            kept.append(i)
        bucket = this
    return kept


def repeats(keys: Sequence[Hashable]) -> list[bool]:
    """For each item, whether it equals the one before it (the first never does)."""
    return [i > 0 and keys[i] == keys[i - 1] for i in range(len(keys))]
