"""A page load's telemetry reply over an hour of history, against a real jupyter_server: bounded,
valid, gzipped when the client accepts it, and incremental (`since=`) replies as they were."""

from __future__ import annotations

import gzip
import json

import pytest
from support.jupyter_api import check_reply, get
from support.long_history import fill_history
from support.paths import READINGS
from support.waiting import wait_for

from jupyter_gpu.analysis.history_thinning import BLOCK_SECONDS, BUCKET_SECONDS, RECENT_SECONDS
from jupyter_gpu.server.full_history import Encoder

HOUR = 3600


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {
        "backend": "simulated",
        "simulated_readings": str(READINGS),
        "interval": 1.0,
        "slow_interval": 5.0,
        "history_seconds": HOUR,
    }


async def _hour_of_history(jp_fetch, gpu_monitor):
    await wait_for(lambda: _available(jp_fetch), what="the first sample")
    return fill_history(gpu_monitor.sampler, HOUR - 1)


async def _available(jp_fetch):
    body = await get(jp_fetch, "telemetry")
    return body["latest"] is not None


def _filled(history: list[dict]) -> list[list]:
    """Each sample's process lists as the frontend fills them in (shape.ts fillProcesses)."""
    lists, before = [], None
    for sample in history:
        now = [g["processes"] if "processes" in g else before[i] for i, g in enumerate(sample["gpus"])]
        lists.append(now)
        before = now
    return lists


async def test_a_full_reply_of_an_hour_is_thinned_and_keeps_what_the_charts_draw(jp_fetch, gpu_monitor):
    held = await _hour_of_history(jp_fetch, gpu_monitor)
    body = await get(jp_fetch, "telemetry")  # held to the schema
    history = body["history"]
    by_t = {s.t: s for s in [*held, *gpu_monitor.sampler.since(None)]}
    newest = history[-1]["t"]
    recent = [s.t for s in by_t.values() if s.t >= newest - RECENT_SECONDS and s.t <= newest]
    assert [s["t"] for s in history if s["t"] >= newest - RECENT_SECONDS] == recent
    # an hour at 1 Hz: the recent 600 (and the rest of their first minute), then one per bucket
    # (and a sample or two come meanwhile)
    assert len(history) <= RECENT_SECONDS + BLOCK_SECONDS + (HOUR - RECENT_SECONDS) / BUCKET_SECONDS + 3
    assert "processes" in history[0]["gpus"][0]
    assert sum("processes" not in s["gpus"][0] for s in history) > len(history) / 2
    # the lists left out are those of the sample before: filled in, each sample's own
    assert _filled(history) == [json.loads(by_t[s["t"]].processes_key) for s in history]
    unthinned = sum(len(s.json_history) for s in held)
    assert len(json.dumps(body)) < unthinned / 2


async def test_a_full_reply_is_gzipped_for_clients_that_accept_it(jp_fetch, gpu_monitor):
    await _hour_of_history(jp_fetch, gpu_monitor)
    zipped = await jp_fetch(
        "api", "gpu", "telemetry", headers={"Accept-Encoding": "gzip"}, decompress_response=False
    )
    assert zipped.headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in zipped.headers["Vary"]
    body = json.loads(gzip.decompress(zipped.body))
    check_reply("telemetry", body)
    plain = await jp_fetch("api", "gpu", "telemetry", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers
    assert len(zipped.body) < len(plain.body) / 5
    # the two requests may straddle a new sample: the same recent samples up to the older's newest
    plain_history = json.loads(plain.body)["history"]
    shorter = min(body["history"][-1]["t"], plain_history[-1]["t"])
    recent = [s["t"] for s in body["history"] if shorter - 300 <= s["t"] <= shorter]
    assert len(recent) > 250 and recent == [
        s["t"] for s in plain_history if shorter - 300 <= s["t"] <= shorter
    ]


async def test_a_full_reply_after_new_samples_is_the_fresh_encoding_of_the_history(jp_fetch, gpu_monitor):
    """The reply is kept from one sample to the next and brought up to date: new samples in it,
    the oldest gone, as if it were encoded anew."""
    sampler = gpu_monitor.sampler
    await _hour_of_history(jp_fetch, gpu_monitor)
    before = await get(jp_fetch, "telemetry")
    await wait_for(lambda: _newer(sampler, before["latest"]["t"], 3), timeout=10, what="three new samples")
    sampler.stop()  # the history holds still
    after = await get(jp_fetch, "telemetry")
    fresh = json.loads(gzip.decompress(Encoder().prefix(sampler.since(None)).gzip(b'"now": 0}')))
    assert after["history"] == fresh["history"] and after["latest"] == fresh["latest"]
    assert after["history"][-1]["t"] >= before["history"][-1]["t"] + 3
    assert after["history"][0]["t"] > before["history"][0]["t"]  # the oldest samples left


async def _newer(sampler, t: float, count: int) -> bool:
    return len(sampler.since(t)) >= count


async def test_since_replies_are_every_newer_sample_with_its_processes(jp_fetch, gpu_monitor):
    held = await _hour_of_history(jp_fetch, gpu_monitor)
    since = held[-20].t
    body = await get(jp_fetch, "telemetry", since=str(since))
    newer = {s.t: s for s in gpu_monitor.sampler.since(since)}
    assert [s["t"] for s in body["history"]] == sorted(newer)[: len(body["history"])]
    assert len(body["history"]) >= 19
    for sample in body["history"]:
        assert sample == json.loads(newer[sample["t"]].json_history)
