"""On a real GPU machine: the energy counter grows while matmuls run, at the rate of the power
NVML reports; the throttle and memory-error fields read or say why not; /metrics agrees with
nvidia-smi for power and memory."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from support.jupyter_api import get
from support.machine import nvidia_smi
from support.prometheus_text import parse
from support.waiting import wait_for

from jupyter_gpu.nvml.fields import MEMORY_ERROR_FIELDS

pytestmark = pytest.mark.gpu
MIB = 1024**2
MATMULS = """
import time, torch
a = torch.randn(8192, 8192, device="cuda:0")
torch.cuda.synchronize()
print("running", flush=True)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    for _ in range(8):
        a @ a
    torch.cuda.synchronize()
"""
NEW_FIELDS = ("energy_joules", "clock_throttle_reasons", "memory_temperature_celsius") + tuple(
    name for name, _ in MEMORY_ERROR_FIELDS
)


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 0.2, "slow_interval": 1.0}


async def _slow_fields_read(jp_fetch):
    """The latest sample once the slow cadence has read its fields (they are null until then)."""
    body = await get(jp_fetch, "telemetry")
    latest = body["latest"]
    done = latest and all(
        g.get("memory_temperature_celsius") is not None or "memory_temperature_celsius" in g["unsupported"]
        for g in latest["gpus"]
    )
    return body if done else None


def _gpu0(sample: dict) -> dict:
    return next(g for g in sample["gpus"] if g["index"] == 0)


async def test_energy_grows_at_the_power_drawn_while_matmuls_run(jp_fetch, gpu_monitor):
    body = await wait_for(lambda: _slow_fields_read(jp_fetch), timeout=15)
    assert _gpu0(body["latest"])["energy_joules"] is not None, _gpu0(body["latest"])["unsupported"]
    before = _gpu0(body["latest"])["energy_joules"]
    start = time.time()
    worker = subprocess.Popen(
        [sys.executable, "-c", MATMULS.format(seconds=6)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout.readline().strip() == "running"
        assert worker.wait(60) == 0
    finally:
        worker.kill()
    body = await get(jp_fetch, "telemetry", since=start)
    during = [_gpu0(s) for s in body["history"] if s["t"] >= start]
    assert len(during) >= 10
    # the counter is read on the slow cadence: the rate between the first and last samples where
    # a new reading appeared, against the power the fast samples read between them
    times = [s["t"] for s in body["history"] if s["t"] >= start]
    changes = [
        i for i in range(1, len(during)) if during[i]["energy_joules"] != during[i - 1]["energy_joules"]
    ]
    assert len(changes) >= 3, [g["energy_joules"] for g in during]
    first, last = changes[0], changes[-1]
    joules = during[last]["energy_joules"] - during[first]["energy_joules"]
    mean_power = sum(g["power_watts"] for g in during[first:last]) / (last - first)
    assert during[-1]["energy_joules"] > before
    seconds = times[last] - times[first]
    assert joules / seconds == pytest.approx(mean_power, rel=0.3)
    assert max(g["utilization_gpu_percent"] for g in during) > 50  # the loop did load the GPU
    families = parse((await jp_fetch("metrics")).body.decode())
    energy = {s.labels["gpu"]: s.value for s in families["jupyter_gpu_energy_joules"][1]}
    assert energy["0"] >= during[-1]["energy_joules"]
    print(json.dumps({"joules": joules, "seconds": seconds, "mean_power_watts": mean_power}))


async def test_throttle_and_memory_error_fields_read_or_say_why(jp_fetch, gpu_monitor):
    body = await wait_for(lambda: _slow_fields_read(jp_fetch), timeout=15)
    for gpu in body["latest"]["gpus"]:
        for field in NEW_FIELDS:
            assert field in gpu
            assert (gpu[field] is None) == (field in gpu["unsupported"]), (field, gpu["unsupported"])
        print(json.dumps({f: gpu[f] for f in NEW_FIELDS} | {"unsupported": gpu["unsupported"]}))
    text = (await jp_fetch("metrics")).body.decode()
    families = parse(text)
    throttled = [g for g in body["latest"]["gpus"] if g["clock_throttle_reasons"] is not None]
    if throttled:
        assert len(families["jupyter_gpu_clock_throttle_active"][1]) == 9 * len(throttled)
    for gpu in body["latest"]["gpus"]:
        if gpu["ecc_uncorrected_volatile"] is None:
            assert f'jupyter_gpu_ecc_errors_total{{error_type="uncorrected",gpu="{gpu["index"]}"' not in text


async def test_metrics_agree_with_nvidia_smi_for_power_and_memory(jp_fetch, gpu_monitor):
    await wait_for(lambda: _slow_fields_read(jp_fetch), timeout=15)
    families = parse((await jp_fetch("metrics")).body.decode())
    smi = {int(r[0]): r for r in nvidia_smi("index,power.draw,memory.used,memory.total")}
    power = {int(s.labels["gpu"]): s.value for s in families["jupyter_gpu_power_watts"][1]}
    used = {int(s.labels["gpu"]): s.value for s in families["jupyter_gpu_memory_used_bytes"][1]}
    assert set(power) == set(smi) == set(used)
    for index, row in smi.items():
        # both read NVML's power average; an idle GPU's draw still moves by a few watts
        assert power[index] == pytest.approx(float(row[1]), abs=max(20.0, 0.1 * float(row[1])))
        assert abs(used[index] - float(row[2]) * MIB) <= 0.01 * float(row[3]) * MIB
