"""Which samples a page load's telemetry reply keeps (analysis/history_thinning.py), without a server."""

from __future__ import annotations

from jupyter_gpu.analysis.history_thinning import blocks, thin


def test_recent_blocks_are_kept_whole_and_older_ones_one_sample_per_bucket_the_newest():
    times = [1000.0 + 0.5 * i for i in range(100)]  # 49.5 s of samples twice a second
    kept = thin(times, recent_seconds=10.0, bucket_seconds=5.0, block_seconds=10.0)
    # 10 s before the newest (1049.5) is 1039.5, in the block [1030, 1040): kept whole from 1030
    recent = [i for i, t in enumerate(times) if t >= 1030.0]
    assert kept[-len(recent) :] == recent
    old = [times[i] for i in kept[: -len(recent)]]
    # buckets [1000, 1005), [1005, 1010) ... up to that block: the newest of each
    assert old == [1004.5, 1009.5, 1014.5, 1019.5, 1024.5, 1029.5]
    assert kept == sorted(kept)


def test_blocks_are_aligned_to_the_epoch_and_thinned_whole():
    times = [float(t) for t in range(55, 200, 5)]  # 55 ... 195
    spans = blocks(times, recent_seconds=60.0, block_seconds=60.0)
    # [0, 60): 55; [60, 120): 60 ... 115; [120, 180): 120 ... 175; [180, 240): 180 ... 195.
    # 60 s before 195 is 135, in [120, 180): that block and the newer one are not thinned.
    assert [(times[a], times[b - 1], thinned) for a, b, thinned in spans] == [
        (55.0, 55.0, True),
        (60.0, 115.0, True),
        (120.0, 175.0, False),
        (180.0, 195.0, False),
    ]
    assert blocks([]) == []


def test_a_short_history_is_kept_whole():
    times = [5.0, 6.0, 7.0]
    assert thin(times, recent_seconds=600.0, bucket_seconds=3.0) == [0, 1, 2]
    assert thin([]) == []


def test_a_peak_between_kept_samples_is_not_kept():
    """Kept samples are real samples, never merged: a one-sample peak inside a bucket is dropped."""
    times = [0.0, 1.0, 2.0, 100.0]
    utilisation = [0, 100, 0, 5]
    kept = thin(times, recent_seconds=1.0, bucket_seconds=3.0, block_seconds=3.0)
    assert [utilisation[i] for i in kept] == [0, 5]


def test_kept_samples_stay_kept_as_the_history_moves_on():
    """Buckets are aligned to the epoch, so consecutive page loads draw the same old points."""
    times = [float(t) for t in range(0, 100)]
    first = {times[i] for i in thin(times, recent_seconds=20.0, bucket_seconds=4.0, block_seconds=8.0)}
    later_times = times[10:] + [100.0, 101.0]
    later = {
        later_times[i] for i in thin(later_times, recent_seconds=20.0, bucket_seconds=4.0, block_seconds=8.0)
    }
    assert {t for t in first if 10.0 <= t < 60.0} <= later


def test_gaps_between_kept_samples_stay_under_the_charts_gap_threshold():
    """The charts break a line where samples lie more than max(3 x interval, 5 s) apart."""
    for interval in (0.25, 1.0, 1.5, 2.0, 2.9):
        times = [1_764_460_800.37 + interval * i for i in range(int(3600 / interval))]
        kept = [times[i] for i in thin(times)]
        widest = max(b - a for a, b in zip(kept, kept[1:]))
        assert widest < max(3 * interval, 5.0), interval
