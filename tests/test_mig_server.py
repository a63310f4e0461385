"""A GPU in MIG mode, through a real jupyter_server replaying NVML's MIG handles (simulated
backend, tests/fixtures/nvml_readings_mig.json: GPU 0 split into 3g.71gb, 2g.35gb and 1g.18gb
instances, the first running a process; GPU 1 whole). Each MIG device is a device of its own in
every reply and series, with its UUID, memory and processes; what belongs to the whole GPU is on
GPU 0 alone, and no process or byte is counted twice. Every reply is held to its schema (``get``)."""

from __future__ import annotations

import json

import pytest
from support.cli import gpu_status
from support.jupyter_api import get, start_notebook_kernel
from support.paths import MIG_READINGS
from support.prometheus_text import parse, series
from support.waiting import wait_for

FIXTURE = json.loads(MIG_READINGS.read_text())
GPU0, GPU1 = (d["uuid"] for d in FIXTURE["devices"])
INSTANCES = FIXTURE["devices"][0]["mig_devices"]
BIG, MEDIUM, SMALL = (m["uuid"] for m in INSTANCES)  # 3g.71gb, 2g.35gb, 1g.18gb
GIB = 1024**3


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config):
    return {**gpu_monitor_config, "simulated_readings": str(MIG_READINGS)}


async def _latest(jp_fetch, ready=lambda body: True):
    async def sampled():
        body = await get(jp_fetch, "telemetry")
        return body if body["latest"] and ready(body) else None

    return (await wait_for(sampled))["latest"]


async def test_each_mig_device_is_a_device_after_its_gpu(jp_fetch, gpu_monitor):
    await _latest(jp_fetch)
    devices = (await get(jp_fetch, "devices"))["devices"]
    # nvitop's order: the GPU, then its MIG devices; GPUs keep nvidia-smi's index, MIG devices follow
    assert [(d["index"], d["uuid"]) for d in devices] == [
        (0, GPU0),
        (2, BIG),
        (3, MEDIUM),
        (4, SMALL),
        (1, GPU1),
    ]
    assert devices[0]["mig"] is None and devices[0]["mig_mode"] == {"current": True, "pending": True}
    assert devices[4]["mig"] is None and devices[4]["mig_mode"] == {"current": False, "pending": False}
    assert [d["mig"] for d in devices[1:4]] == [
        {
            "parent_index": 0,
            "parent_uuid": GPU0,
            "gpu_instance_id": gi,
            "compute_instance_id": 0,
            "profile": p,
        }
        for gi, p in ((2, "3g.71gb"), (3, "2g.35gb"), (9, "1g.18gb"))
    ]
    small = devices[3]
    assert small["name"] == "NVIDIA H200 MIG 1g.18gb" and small["memory_total_bytes"] == 17152 * 1024**2
    assert small["pci_bus_id"] == devices[0]["pci_bus_id"]  # part of GPU 0's PCI device
    assert (
        small["power_limit_watts"] is None
        and small["unsupported"]["power_limit_watts"] == "GPU-wide: see GPU 0"
    )
    assert devices[0]["power_limit_watts"] == 700.0


async def test_gpu_wide_readings_are_the_gpus_and_processes_the_instances(jp_fetch, gpu_monitor):
    latest = await _latest(jp_fetch, lambda body: body["latest"]["gpus"][0]["pcie_rx_bytes_per_second"])
    gpus = {g["uuid"]: g for g in latest["gpus"]}
    gpu0, big, small = gpus[GPU0], gpus[BIG], gpus[SMALL]
    # the whole GPU: its temperature, power, clocks and PCIe; its memory (all instances together)
    assert gpu0["temperature_celsius"] == 38 and gpu0["power_watts"] == pytest.approx(123.82)
    assert gpu0["pcie_rx_bytes_per_second"] == 458 * 1024
    assert gpu0["memory_used_bytes"] == sum(m["memory_v2"]["used"] for m in INSTANCES)
    assert gpu0["utilization_gpu_percent"] is None
    assert gpu0["unsupported"]["utilization_gpu_percent"] == "not supported while MIG mode is on"
    # an instance: its own memory (NVML's v2) and processes, none of the whole GPU's figures
    assert big["mig"]["profile"] == "3g.71gb"
    assert big["memory_used_bytes"] == INSTANCES[0]["memory_v2"]["used"]
    assert big["memory_total_bytes"] == INSTANCES[0]["memory_v2"]["total"]
    assert big["processes"] == [
        {"pid": 564, "used_memory_bytes": INSTANCES[0]["compute_processes"][0]["used_gpu_memory"]}
    ]
    assert small["processes"] == [] and small["memory_used_bytes"] == 0
    for field in (
        "temperature_celsius",
        "power_watts",
        "energy_joules",
        "clock_sm_mhz",
        "pcie_rx_bytes_per_second",
    ):
        assert big[field] is None and big["unsupported"][field] == "GPU-wide: see GPU 0", field
    assert big["unsupported"]["utilization_gpu_percent"] == "not supported on a MIG device"
    # NVML lists the instance's process on the GPU too: it counts on the instance alone
    assert gpu0["processes"] is None and gpu0["unsupported"]["processes"] == "listed on its MIG devices"
    listed = [(g["index"], p["pid"]) for g in latest["gpus"] for p in g["processes"] or ()]
    assert listed == [(2, 564)]


async def test_a_kernel_on_a_mig_device_is_attributed_to_that_device(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/mig.ipynb")
    pid = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    small = gpu_monitor.simulated_nvml.readings["devices"][0]["mig_devices"][2]
    small["compute_processes"].append({"pid": pid, "used_gpu_memory": 5 * GIB})

    async def attributed():
        body = await get(jp_fetch, "kernels")
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        return body if mine["gpu_memory"] else None

    body = await wait_for(attributed)
    mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
    assert mine["gpu_memory"] == [
        {"gpu_index": 4, "uuid": SMALL, "used_memory_bytes": 5 * GIB, "pids": [pid]}
    ]
    assert mine["memory_bytes"] == 5 * GIB  # once: not again on GPU 0
    assert [(u["pid"], u["gpu_index"], u["uuid"]) for u in body["unattributed"]] == [(564, 2, BIG)]


async def test_mig_devices_have_series_of_their_own_labelled_as_dcgm_does(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/mig.ipynb")
    pid = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    gpu_monitor.simulated_nvml.readings["devices"][0]["mig_devices"][2]["compute_processes"].append(
        {"pid": pid, "used_gpu_memory": 5 * GIB}
    )

    async def kernel_series():
        await get(jp_fetch, "kernels")  # refreshes the attribution /metrics reports
        text = (await jp_fetch("metrics")).body.decode()
        return text if "jupyter_gpu_kernel_memory_used_bytes{" in text else None

    text = await wait_for(kernel_series)
    families = parse(text)
    used = {s.labels["uuid"]: s.labels for s in families["jupyter_gpu_memory_used_bytes"][1]}
    assert used[SMALL] == {"gpu": "0", "uuid": SMALL, "GPU_I_ID": "9", "GPU_I_PROFILE": "1g.18gb"}
    assert used[GPU0] == {"gpu": "0", "uuid": GPU0} and used[GPU1] == {"gpu": "1", "uuid": GPU1}
    totals = {s.labels["uuid"]: s.value for s in families["jupyter_gpu_memory_total_bytes"][1]}
    assert totals[BIG] == INSTANCES[0]["memory_v2"]["total"]
    # GPU-wide series for whole GPUs only: power and temperature once per GPU
    for name in (
        "jupyter_gpu_power_watts",
        "jupyter_gpu_temperature_celsius",
        "jupyter_gpu_pcie_rx_bytes_per_second",
    ):
        assert {s.labels["uuid"] for s in families[name][1]} <= {GPU0, GPU1}, name
    (held,) = families["jupyter_gpu_kernel_memory_used_bytes"][1]
    assert held.value == 5 * GIB and held.labels["GPU_I_ID"] == "9" and held.labels["uuid"] == SMALL
    (other,) = families["jupyter_gpu_unattributed_memory_used_bytes"][1]
    assert other.labels["GPU_I_PROFILE"] == "3g.71gb"
    info = {s.labels["uuid"]: s.labels for s in families["jupyter_gpu_gpu_info"][1]}
    assert info[BIG]["parent_uuid"] == GPU0 and "parent_uuid" not in info[GPU0]
    assert len(series(text)) == len(set(series(text)))


async def test_jupyter_gpu_status_lists_mig_devices_under_their_gpu(
    jp_fetch, jp_serverapp, jp_http_port, jp_base_url, gpu_monitor
):
    await _latest(jp_fetch)
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    token = jp_serverapp.identity_provider.token
    status = json.loads(await gpu_status(url, token, "--json"))
    assert [(g["index"], (g["mig"] or {}).get("profile")) for g in status["gpus"]] == [
        (0, None),
        (2, "3g.71gb"),
        (3, "2g.35gb"),
        (4, "1g.18gb"),
        (1, None),
    ]
    assert [(p["gpu_index"], p["pid"]) for p in status["processes"]] == [(2, 564)]
    lines = (await gpu_status(url, token)).splitlines()
    rows = lines[lines.index("") + 2 : lines.index("") + 7]
    assert rows[0].split()[:3] == ["0", "NVIDIA", "H200"]
    assert rows[1].split()[:6] == ["2", "└", "MIG", "3g.71gb", "(GI", "2,"]
    assert "12.5 / 66.3 GiB (19%)" in rows[1] and " C " not in rows[1]
    assert rows[3].split()[:4] == ["4", "└", "MIG", "1g.18gb"] and rows[4].split()[0] == "1"
