"""NVML faults are states, not crashes: the API keeps answering and the sampler recovers."""

from __future__ import annotations

import json
import logging

import pynvml
import pytest
from support.jupyter_api import get
from support.waiting import wait_for

from jupyter_gpu.server.schema import VERSION


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def latest(jp_fetch) -> dict | None:
    return (await get(jp_fetch, "telemetry"))["latest"]


async def test_gpu_lost_mid_run_is_a_state_and_recovers(jp_fetch, gpu_monitor, caplog):
    nvml = gpu_monitor.simulated_nvml
    await wait_for(lambda: latest(jp_fetch))
    nvml.lose_gpu(1)

    async def lost():
        gpus = (await latest(jp_fetch))["gpus"]
        return gpus if gpus[1]["state"] == "lost" else None

    gpus = await wait_for(lost)
    assert gpus[1]["state"] == "lost" and "GPU 1 is lost" in gpus[1]["error"]
    assert gpus[1].get("memory_used_bytes") is None
    assert gpus[0]["state"] == "ok" and gpus[0]["memory_used_bytes"] == 3222077440
    nvml.restore_gpu(1)

    async def back():
        gpus = (await latest(jp_fetch))["gpus"]
        return gpus if gpus[1]["state"] == "ok" else None

    assert (await wait_for(back))[1]["memory_used_bytes"] == 3407872
    no_tracebacks(caplog)


async def test_driver_unloaded_mid_run_then_back(jp_fetch, gpu_monitor, caplog):
    nvml = gpu_monitor.simulated_nvml
    await wait_for(lambda: latest(jp_fetch))
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    async def down():
        body = await get(jp_fetch, "telemetry")
        return body if not body["available"] else None

    body = await wait_for(down)
    assert body["state"] == "unavailable" and body["problem"] == "driver_not_loaded"
    assert "not loaded" in body["reason"] and "modprobe" in body["reason"]
    assert body["latest"] is None
    for route in ("devices", "kernels"):
        other = await get(jp_fetch, route)
        assert other["problem"] == "driver_not_loaded" and "not loaded" in other["reason"]
    nvml.clear_faults()

    async def up():
        body = await get(jp_fetch, "telemetry")
        return body if body["available"] and body["latest"] else None

    assert (await wait_for(up))["latest"]["gpus"][0]["state"] == "ok"
    no_tracebacks(caplog)


async def test_a_call_that_fails_only_sometimes_costs_one_field_once(jp_fetch, gpu_monitor, caplog):
    nvml = gpu_monitor.simulated_nvml
    await wait_for(lambda: latest(jp_fetch))
    nvml.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN, device=0, times=1)

    async def failed_sample():
        body = await get(jp_fetch, "telemetry", since="0")
        for sample in body["history"]:
            gpu0 = sample["gpus"][0]
            if gpu0["temperature_celsius"] is None:
                return sample
        return None

    sample = await wait_for(failed_sample)
    assert sample["gpus"][0]["unsupported"]["temperature_celsius"].startswith("read failed")
    assert sample["gpus"][0]["power_watts"] == pytest.approx(123.82)  # the rest of the sample is intact
    assert sample["gpus"][1]["temperature_celsius"] == 37

    async def next_temperature():
        return (await latest(jp_fetch))["gpus"][0]["temperature_celsius"]

    assert await wait_for(next_temperature) == 38
    no_tracebacks(caplog)


async def test_mig_explains_missing_utilisation(jp_fetch, gpu_monitor, tmp_path):
    nvml = gpu_monitor.simulated_nvml
    await wait_for(lambda: latest(jp_fetch))
    # what an A100/H100 in MIG mode answers: utilisation is not supported on the parent GPU
    nvml.readings["devices"][0]["mig_mode"] = [1, 1]
    nvml.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_NOT_SUPPORTED, device=0)
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_DRIVER_NOT_LOADED, times=1)  # force a re-open

    async def mig():
        body = await get(jp_fetch, "telemetry")
        gpu0 = body["latest"] and body["latest"]["gpus"][0]
        return gpu0 if gpu0 and gpu0["utilization_gpu_percent"] is None else None

    gpu0 = await wait_for(mig)
    assert gpu0["unsupported"]["utilization_gpu_percent"] == "not supported while MIG mode is on"
    devices = await get(jp_fetch, "devices")
    assert devices["devices"][0]["mig_mode"] == {"current": True, "pending": True}


class TestNoDriver:
    @pytest.fixture
    def gpu_monitor_config(self, tmp_path):
        readings = tmp_path / "no-driver.json"
        readings.write_text(json.dumps({"init_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}))
        return {
            "backend": "simulated",
            "simulated_readings": str(readings),
            "interval": 0.05,
            "retry_interval": 0.1,
        }

    @pytest.mark.parametrize("route", ["devices", "telemetry", "kernels"])
    async def test_every_route_answers_with_an_actionable_reason(self, jp_fetch, gpu_monitor, route, caplog):
        body = await wait_for(lambda: _settled(get(jp_fetch, route)))
        assert body["state"] == "unavailable" and body["problem"] == "library_not_found"
        assert "No NVIDIA driver found" in body["reason"] and "Install the NVIDIA driver" in body["reason"]
        no_tracebacks(caplog)


async def _settled(coro):
    body = await coro
    return body if body["state"] != "starting" else None


class TestRealNvmlWithoutGpu:
    """On a machine without NVIDIA's library (CI), the default backend says so."""

    @pytest.fixture
    def gpu_monitor_config(self):
        return {"interval": 0.05}

    async def test_default_backend_explains_missing_driver(self, jp_fetch, gpu_monitor):
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            pass
        else:
            pynvml.nvmlShutdown()
            pytest.skip("this machine has a working NVML")
        body = await wait_for(lambda: _settled(get(jp_fetch, "devices")))
        assert body == {
            "version": VERSION,
            "available": False,
            "state": "unavailable",
            "problem": body["problem"],  # which one depends on what this machine lacks
            "reason": body["reason"],
            "simulated": False,
            "driver_version": None,
            "cuda_driver_version": None,
            "devices": [],
        }
        assert "NVIDIA" in body["reason"]
