"""A page load's reply built block by block (server/full_history.py), without a server: whatever
the sampler did between two replies, the reply is the history's fresh encoding, and a valid gzip."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import random
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from jupyter_gpu.analysis.crc32 import crc32_combine
from jupyter_gpu.analysis.history_thinning import thin
from jupyter_gpu.server.full_history import Encoder, FullHistory
from jupyter_gpu.server.sampler import Sample, Sampler

FIELDS = '"now": 1.5}'
START = 1_764_460_800.37  # not on a minute: blocks start mid-history


def _history(count: int) -> list[Sample]:
    """Two GPUs sampled once a second; their process lists change every 7 samples."""
    samples = []
    for k in range(count):
        gpus = [
            {
                "index": i,
                "state": "ok",
                "utilization_gpu_percent": (k * 7 + i) % 101,
                "processes": [{"pid": 100 + j, "used_memory_bytes": (k // 7 + 1) << 20} for j in range(3)],
                "unsupported": {},
            }
            for i in range(2)
        ]
        samples.append(Sample.encode(START + k, cast("Any", tuple(gpus))))
    return samples


HISTORY = _history(1500)
WINDOW = 900  # the sampler keeps 15 minutes: older samples leave as new ones come


def _reply(encoder: Encoder, samples: list[Sample]) -> dict:
    prefix = encoder.prefix(samples)
    text = gzip.decompress(prefix.gzip(FIELDS.encode()))  # checks the CRC-32 and length too
    assert prefix.plain(FIELDS.encode()) == text
    return json.loads(text)


def _fresh(samples: list[Sample]) -> dict:
    return _reply(Encoder(), samples)


def test_the_reply_after_new_samples_is_the_fresh_encoding_of_the_history():
    encoder = Encoder()
    for start in (0, 1, 2, 3, 5, 8, 25, 84, 144, 205, 206, 326, 327, len(HISTORY) - WINDOW):
        window = HISTORY[start : start + WINDOW]
        reply = _reply(encoder, window)
        assert reply == _fresh(window), start
        assert reply["latest"] == json.loads(window[-1].json_full) and reply["now"] == 1.5
        # the samples thin() keeps, each sent whole but for process lists that repeat the one
        # before it
        kept = [window[i] for i in thin([s.t for s in window])]
        assert [s["t"] for s in reply["history"]] == [s.t for s in kept]
        for i, (sent, sample) in enumerate(zip(reply["history"], kept)):
            repeat = i > 0 and kept[i - 1].processes_key == sample.processes_key
            assert sent == json.loads(sample.json_lean if repeat else sample.json_history)


def test_replies_built_at_once_on_threads_each_hold_exactly_their_history():
    """Requests that straddle new samples: one reply built while a newer (or older) history is
    built on another thread neither loses nor repeats a sample of its own."""
    encoder = Encoder()
    windows = [HISTORY[s : s + WINDOW] for s in range(0, 600, 7)]
    order = windows * 2
    random.Random(5).shuffle(order)
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda w: _reply(encoder, w), order))
    fresh = {id(w): _fresh(w) for w in windows}
    for window, reply in zip(order, replies):
        assert reply == fresh[id(window)]


async def test_a_sample_that_comes_while_a_reply_is_built_gets_a_reply_of_its_own():
    sampler = Sampler(
        cast("Any", None), interval=1.0, slow_interval=5.0, history_seconds=WINDOW, retry_interval=1.0
    )
    sampler._history.extend(HISTORY[:WINDOW])  # as the sampler's thread appends, under its lock
    full = FullHistory()
    first = asyncio.ensure_future(full.reply(sampler, FIELDS, gzip=True))
    await asyncio.sleep(0)  # the first reply's encoding has started on a thread
    with sampler._lock:
        sampler._history.append(HISTORY[WINDOW])  # the oldest leaves
    bodies = await asyncio.gather(
        first, full.reply(sampler, FIELDS, gzip=True), full.reply(sampler, FIELDS, gzip=False)
    )
    assert json.loads(gzip.decompress(bodies[0])) == _fresh(HISTORY[:WINDOW])
    newer = _fresh(HISTORY[1 : WINDOW + 1])
    assert json.loads(gzip.decompress(bodies[1])) == json.loads(bodies[2]) == newer

    # while the history holds still, requests share the bytes encoded for it: nothing is encoded
    encoded = []
    encode = full._encoder.prefix
    full._encoder.prefix = lambda samples: encoded.append(samples) or encode(samples)  # type: ignore[method-assign]
    assert await full.reply(sampler, FIELDS, gzip=True) == bodies[1]
    assert encoded == []


def test_crc32_combine_is_the_crc_of_the_joined_bytes():
    for first, second in ((0, 0), (1, 0), (0, 1), (17, 5000), (3, 1 << 20)):
        a, b = os.urandom(first), os.urandom(second)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
