"""A sampler's history as an hour of sampling leaves it, written in at once (a test cannot wait an
hour): copies of its latest sample one interval apart, ending at that sample, whose processes grow
every ``change_every`` samples, as a notebook's allocations do."""

from __future__ import annotations

from typing import Any, cast

from jupyter_gpu.server.sampler import Sample, Sampler


def fill_history(sampler: Sampler, count: int, change_every: int = 60) -> list[Sample]:
    """Put ``count`` samples before the sampler's latest one (trimmed to what it keeps); they are
    returned, oldest first, as the sampler holds them."""
    latest = sampler.latest()
    assert latest is not None, "the sampler has no sample to copy yet"
    samples = []
    for k in range(count):
        gpus = []
        for gpu in latest.gpus:
            copy: dict[str, Any] = dict(gpu)
            if copy.get("processes"):
                grown = 1 + k // change_every
                copy["processes"] = [
                    {**p, "used_memory_bytes": (p["used_memory_bytes"] or 0) + grown}
                    for p in copy["processes"]
                ]
            gpus.append(copy)
        t = latest.t - (count - k) * sampler.interval
        samples.append(Sample.encode(t, cast("Any", tuple(gpus))))
    with sampler._lock:  # the sampler thread appends under this lock
        newer = [s for s in sampler._history if s.t > latest.t - sampler.interval / 2]
        sampler._history.clear()
        sampler._history.extend(samples + newer)
        return list(sampler._history)
