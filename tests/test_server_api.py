"""The REST API against a real jupyter_server replaying H200 readings."""

from __future__ import annotations

import gzip
import json

import pytest
from support.jupyter_api import check_reply, get
from support.paths import READINGS
from support.waiting import wait_for
from tornado.httpclient import HTTPClientError

FIXTURE = json.loads(READINGS.read_text())


async def test_devices_report_what_nvml_returned(jp_fetch, gpu_monitor):
    body = await wait_for(lambda: _available(get(jp_fetch, "devices")))
    assert body["simulated"] is True
    assert body["driver_version"] == "580.159.04"
    assert body["cuda_driver_version"] == "13.0"
    assert [d["uuid"] for d in body["devices"]] == [d["uuid"] for d in FIXTURE["devices"]]
    first = body["devices"][0]
    assert first["name"] == "NVIDIA H200"
    assert first["pci_bus_id"] == "00000000:00:06.0"
    assert first["memory_total_bytes"] == 150754820096
    assert first["power_limit_watts"] == 700.0
    assert first["mig_mode"] == {"current": False, "pending": False}


async def _available(coro):
    body = await coro
    ready = body["available"] and body.get("latest", True) is not None
    return body if ready else None


async def test_telemetry_uses_memory_v2_and_marks_unsupported_fields(jp_fetch, gpu_monitor):
    body = await wait_for(lambda: _available(get(jp_fetch, "telemetry")))
    gpu0 = body["latest"]["gpus"][0]
    v2 = FIXTURE["devices"][0]["memory_v2"]
    # v2 separates the driver reserve: v1 `used` would be 3,867,017,216 here
    assert gpu0["memory_used_bytes"] == v2["used"] == 3222077440
    assert gpu0["memory_reserved_bytes"] == v2["reserved"]
    assert gpu0["memory_free_bytes"] == v2["free"]
    assert gpu0["temperature_celsius"] == 38
    assert gpu0["power_watts"] == pytest.approx(123.82)
    assert gpu0["clock_sm_mhz"] == 1980 and gpu0["clock_mem_mhz"] == 3201
    assert gpu0["processes"] == [{"pid": 564, "used_memory_bytes": 3212836864}]
    assert gpu0["fan_speed_percent"] is None
    assert gpu0["unsupported"]["fan_speed_percent"] == "not supported on this GPU"
    assert gpu0["state"] == "ok"


async def test_pcie_arrives_on_the_slow_cadence(jp_fetch, gpu_monitor):
    async def pcie():
        body = await get(jp_fetch, "telemetry")
        latest = body["latest"]
        return latest and latest["gpus"][1]["pcie_rx_bytes_per_second"]

    # NVML reports KiB/s; the API serves bytes/s
    assert await wait_for(pcie) == FIXTURE["devices"][1]["pcie_rx_kbs"] * 1024


async def test_history_since_returns_only_newer_samples(jp_fetch, gpu_monitor):
    await wait_for(lambda: _enough_history(jp_fetch, 5))
    everything = await get(jp_fetch, "telemetry")
    times = [s["t"] for s in everything["history"]]
    assert times == sorted(times)
    cut = times[-3]
    newer = await get(jp_fetch, "telemetry", since=str(cut))
    assert newer["history"] and all(s["t"] > cut for s in newer["history"])
    assert [s["t"] for s in newer["history"]][:2] == times[-2:]
    # history carries process lists (memory by notebook over time), without memory error counts; a
    # full reply leaves out lists that repeat the sample before (test_telemetry_first_reply.py)
    assert all(
        "processes" in g and "ecc_corrected_volatile" not in g for s in newer["history"] for g in s["gpus"]
    )
    assert all("processes" in g for g in everything["history"][0]["gpus"])
    assert not any("ecc_corrected_volatile" in g for s in everything["history"] for g in s["gpus"])
    future = await get(jp_fetch, "telemetry", since=str(everything["now"] + 60))
    assert future["history"] == [] and future["latest"] is not None


async def _enough_history(jp_fetch, n):
    return len((await get(jp_fetch, "telemetry"))["history"]) >= n


async def test_full_history_is_gzipped_for_clients_that_accept_it(jp_fetch, gpu_monitor):
    await wait_for(lambda: _enough_history(jp_fetch, 40), timeout=10)
    response = await jp_fetch(
        "api", "gpu", "telemetry", headers={"Accept-Encoding": "gzip"}, decompress_response=False
    )
    assert response.headers["Content-Encoding"] == "gzip"
    body = json.loads(gzip.decompress(response.body))
    check_reply("telemetry", body)
    assert len(body["history"]) >= 40 and len(response.body) < len(json.dumps(body)) / 5
    # an incremental poll stays small and plain
    latest = await jp_fetch(
        "api",
        "gpu",
        "telemetry",
        params={"since": str(body["now"])},
        headers={"Accept-Encoding": "gzip"},
        decompress_response=False,
    )
    assert "Content-Encoding" not in latest.headers and json.loads(latest.body)["latest"]


@pytest.mark.parametrize("since", ["abc", "nan", "inf", "-1", ""])
async def test_malformed_since_is_a_400_with_a_message(jp_fetch, since):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("api", "gpu", "telemetry", params={"since": since})
    assert info.value.code == 400
    assert "since" in json.loads(info.value.response.body)["message"]


@pytest.mark.parametrize("route", ["devices", "telemetry", "kernels"])
async def test_unknown_query_parameter_is_a_400_naming_it(jp_fetch, route):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("api", "gpu", route, params={"sinse": "1"})
    assert info.value.code == 400
    message = json.loads(info.value.response.body)["message"]
    assert "sinse" in message and "Allowed" in message


async def test_jupyterlab_cache_buster_is_not_an_unknown_parameter(jp_fetch, gpu_monitor):
    """ServerConnection.makeRequest appends `?<milliseconds>` to every GET."""
    response = await jp_fetch("api", "gpu", "devices", params={"1764460800123": ""})
    assert response.code == 200
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("api", "gpu", "devices", params={"1764460800123": "x"})
    assert info.value.code == 400


async def test_nvml_runs_only_on_sampler_threads(jp_fetch, gpu_monitor):
    for route in ("devices", "telemetry", "kernels", "host", "exits"):
        await get(jp_fetch, route)
    threads = gpu_monitor.simulated_nvml.threads
    # the samplers, and the GPU error events' own thread (nvmlEventSetWait blocks): never the loop
    assert threads and all(
        name.startswith("jupyter_gpu-sampler-") or name == "jupyter_gpu-xid-events" for name in threads
    ), threads
