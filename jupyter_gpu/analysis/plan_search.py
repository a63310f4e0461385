"""``--max-batch``: the largest batch that fits, found around a guess by doubling steps and then
bisection, each probe a whole planned step (on fake tensors: a probe costs time, never memory).

A step's peak grows about linearly with the batch (activations do; parameters and optimizer
state do not), so two measured batches give a close guess, and the search needs a handful of
probes around it instead of 2·log2(answer) from scratch.
"""

from __future__ import annotations

from collections.abc import Callable

# Past a million samples per step the answer is "more than you will use"; the search stops there.
MAX_BATCH = 2**20


def linear_guess(batch: int, peak: int, larger_batch: int, larger_peak: int, budget: int) -> int:
    """Where the line through two (batch, peak) points crosses ``budget``."""
    per_sample = (larger_peak - peak) / (larger_batch - batch)
    if per_sample <= 0:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, int(batch + (budget - peak) / per_sample)))


def largest_fitting(fits: Callable[[int], bool], guess: int, limit: int = MAX_BATCH) -> int | None:
    """The largest ``b`` in ``1..limit`` with ``fits(b)``, assuming fits holds up to a boundary
    and not after it; None when not even 1 fits. Steps away from ``guess`` by 1, 2, 4, ... until
    the boundary is bracketed, then bisects."""
    guess = max(1, min(guess, limit))
    step = 1
    if fits(guess):
        good, bad = guess, None
        while bad is None:
            if good >= limit:
                return limit
            probe = min(good + step, limit)
            if fits(probe):
                good = probe
            else:
                bad = probe
            step *= 2
    else:
        good, bad = 0, guess
        while good == 0 and bad > 1:
            probe = max(1, bad - step)
            if fits(probe):
                good = probe
            else:
                bad = probe
            step *= 2
        if good == 0:
            return None
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good
