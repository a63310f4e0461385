"""On a real GPU machine: the API agrees with nvidia-smi, and a kernel's CUDA memory is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.jupyter_api import get, start_notebook_kernel
from support.kernel_client import run_cell
from support.machine import nvidia_smi
from support.waiting import wait_for

pytestmark = pytest.mark.gpu
MIB = 1024**2


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 0.2, "slow_interval": 1.0}


async def _ready(jp_fetch):
    body = await get(jp_fetch, "telemetry")
    return body if body["available"] and body["latest"] else None


async def test_devices_and_memory_agree_with_nvidia_smi(jp_fetch, gpu_monitor):
    telemetry = await wait_for(lambda: _ready(jp_fetch), timeout=15)
    devices = await get(jp_fetch, "devices")
    smi = nvidia_smi("index,uuid,name,pci.bus_id,memory.total,memory.used,power.limit")
    assert [d["uuid"] for d in devices["devices"]] == [row[1] for row in smi]
    assert [d["name"] for d in devices["devices"]] == [row[2] for row in smi]
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.split()[0]
    assert devices["driver_version"] == driver
    for device, gpu, row in zip(devices["devices"], telemetry["latest"]["gpus"], smi):
        total = float(row[4]) * MIB
        assert device["memory_total_bytes"] == pytest.approx(total, rel=0.01)
        assert device["pci_bus_id"].lower().endswith(row[3].lower()[-12:])
        # nvidia-smi's memory.used is NVML's v2 `used` (without the driver reserve)
        assert abs(gpu["memory_used_bytes"] - float(row[5]) * MIB) <= 0.01 * total
        assert device["power_limit_watts"] == pytest.approx(float(row[6]), rel=0.01)
        assert gpu["state"] == "ok" and gpu["temperature_celsius"] > 0 and gpu["power_watts"] > 0
    print(json.dumps({"devices": devices, "latest": telemetry["latest"], "nvidia_smi": smi}, indent=1))


async def test_a_gpu_with_mig_disabled_is_one_whole_device(jp_fetch, gpu_monitor):
    """nvidia-smi says MIG is disabled (an H200 as delivered): one device per GPU, no MIG device,
    and each GPU's processes listed on it."""
    telemetry = await wait_for(lambda: _ready(jp_fetch), timeout=15)
    devices = (await get(jp_fetch, "devices"))["devices"]
    smi = nvidia_smi("index,uuid,mig.mode.current")
    assert [(d["index"], d["uuid"]) for d in devices] == [(int(i), u) for i, u, _ in smi]
    assert {mode for _, _, mode in smi} == {"Disabled"}
    assert all(d["mig"] is None and d["mig_mode"]["current"] is False for d in devices)
    assert [g["uuid"] for g in telemetry["latest"]["gpus"]] == [u for _, u, _ in smi]
    assert all(g["mig"] is None and isinstance(g["processes"], list) for g in telemetry["latest"]["gpus"])
    metrics = (await jp_fetch("metrics")).body.decode()
    assert "jupyter_gpu_memory_used_bytes{" in metrics and "GPU_I_ID" not in metrics


CUDA_HOLD = "import torch; _x = torch.ones(256 * 1024 * 1024, device='cuda:0'); torch.cuda.synchronize(); print('held')"


async def test_a_kernels_cuda_memory_is_attributed_to_its_notebook(jp_fetch, gpu_monitor):
    await wait_for(lambda: _ready(jp_fetch), timeout=15)
    kernel_id = await start_notebook_kernel(jp_fetch, "gpu/holder.ipynb")
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    assert "held" in await run_cell(kernel, CUDA_HOLD)
    outsider = subprocess.Popen(
        [sys.executable, "-c", CUDA_HOLD + "; import time; time.sleep(60)"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert outsider.stdout.readline().strip() == "held"

        async def both_seen():
            body = await get(jp_fetch, "kernels")
            mine = next((k for k in body["kernels"] if k["id"] == kernel_id), None)
            others = [r for r in body["unattributed"] if r["pid"] == outsider.pid]
            return body if mine and mine["gpu_memory"] and others else None

        body = await wait_for(both_seen, timeout=20)
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        assert mine["path"] == "gpu/holder.ipynb"
        apps = {int(r[0]): float(r[2]) * MIB for r in nvidia_smi("pid,gpu_uuid,used_memory", "compute-apps")}
        row = mine["gpu_memory"][0]
        assert row["pids"] == [kernel.provisioner.pid]
        assert row["used_memory_bytes"] >= 1024 * MIB
        assert row["used_memory_bytes"] == pytest.approx(apps[kernel.provisioner.pid], rel=0.01)
        other = next(r for r in body["unattributed"] if r["pid"] == outsider.pid)
        assert "torch.ones" in other["command"]
        metrics = (await jp_fetch("metrics")).body.decode()
        assert f'kernel_id="{kernel_id}"' in metrics and 'notebook_path="gpu/holder.ipynb"' in metrics
        print(json.dumps({"kernels": body, "nvidia_smi_compute_apps": apps}, indent=1))
    finally:
        outsider.kill()


def _gpu_count() -> int:
    try:
        return len(nvidia_smi("index"))
    except (OSError, subprocess.CalledProcessError):
        return 0


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs")
async def test_reordered_cuda_visible_devices_are_attributed_to_the_physical_gpus(jp_fetch, gpu_monitor):
    """NVML ignores CUDA_VISIBLE_DEVICES: cuda:0 in a kernel that sees "1,0" is physical GPU 1."""
    await wait_for(lambda: _ready(jp_fetch), timeout=15)
    manager = gpu_monitor.serverapp.kernel_manager
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1,0", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    kernel_id = await manager.start_kernel(kernel_name="python3", env=env)
    body = json.dumps(
        {"path": "reordered.ipynb", "type": "notebook", "name": "", "kernel": {"id": kernel_id}}
    )
    await jp_fetch("api", "sessions", method="POST", body=body)
    kernel = manager.get_kernel(kernel_id)
    await run_cell(
        kernel,
        "%load_ext jupyter_gpu\nimport torch\n"
        "_a = torch.ones(256 * 1024**2, device='cuda:0')  # 1 GiB on physical GPU 1\n"
        "_b = torch.ones(512 * 1024**2, device='cuda:1')  # 2 GiB on physical GPU 0\n"
        "torch.cuda.synchronize()",
    )
    uuids = {int(row[0]): row[1] for row in nvidia_smi("index,uuid")}

    async def both_gpus_with_allocator():
        body = await get(jp_fetch, "kernels")
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        held = {row["gpu_index"]: row["used_memory_bytes"] for row in mine["gpu_memory"]}
        # the sample may predate the allocations: wait until both tensors show
        ready = held.get(0, 0) > 2 * 1024**3 and held.get(1, 0) > 1024**3
        published = mine["allocator"] and len(mine["allocator"]["devices"]) == 2  # may predate `_b`
        return mine if ready and published else None

    mine = await wait_for(both_gpus_with_allocator, timeout=20)
    apps = {
        (int(r[0]), r[1]): float(r[2]) * MIB for r in nvidia_smi("pid,gpu_uuid,used_memory", "compute-apps")
    }
    pid = kernel.provisioner.pid
    by_index = {row["gpu_index"]: row for row in mine["gpu_memory"]}
    for index in (0, 1):
        assert by_index[index]["uuid"] == uuids[index]
        assert by_index[index]["used_memory_bytes"] == pytest.approx(apps[(pid, uuids[index])], rel=0.01)
    assert by_index[0]["used_memory_bytes"] > by_index[1]["used_memory_bytes"]  # 2 GiB vs 1 GiB
    allocator = {d["index"]: d for d in mine["allocator"]["devices"]}
    assert allocator[0]["uuid"] == uuids[1] and allocator[0]["allocated_bytes"] == 1024**3
    assert allocator[1]["uuid"] == uuids[0] and allocator[1]["allocated_bytes"] == 2 * 1024**3
    print(json.dumps({"kernel": mine, "nvidia_smi_uuids": uuids}, indent=1))


TRAIN_IN_BACKGROUND = """
%load_ext jupyter_gpu
import threading, torch
def _train(seconds=12.0):
    import time
    net = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    opt = torch.optim.AdamW(net.parameters())
    x = torch.randn(2048, 4096, device='cuda')
    end = time.time() + seconds
    while time.time() < end:
        with torch.autocast('cuda', dtype=torch.bfloat16):
            loss = net(x).square().mean()
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
_trainer = threading.Thread(target=_train); _trainer.start()
"""


async def test_the_panel_sees_a_training_notebook(jp_fetch, gpu_monitor, tmp_path):
    """While a notebook trains, telemetry shows the GPU busy and the notebook holding its memory.

    The API responses are saved (to $JUPYTER_GPU_RECORD_DIR when set) so that the sidebar can be
    rendered from real GPU data on a machine with a browser.
    """
    await wait_for(lambda: _ready(jp_fetch), timeout=15)
    kernel_id = await start_notebook_kernel(jp_fetch, "course/train_mlp.ipynb")
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    await run_cell(kernel, TRAIN_IN_BACKGROUND)

    async def busy_and_attributed():
        telemetry = await get(jp_fetch, "telemetry")
        kernels = await get(jp_fetch, "kernels")
        mine = next(k for k in kernels["kernels"] if k["id"] == kernel_id)
        busy = telemetry["latest"]["gpus"][0]["utilization_gpu_percent"] or 0
        if busy >= 50 and mine["gpu_memory"] and mine["allocator"] and mine["allocator"]["devices"]:
            return telemetry, kernels, mine
        return None

    result = await wait_for(busy_and_attributed, timeout=30)
    assert result, "the GPU never showed the training notebook's work"
    telemetry, kernels, mine = result
    gpu0 = telemetry["latest"]["gpus"][0]
    assert gpu0["power_watts"] > 100 and gpu0["memory_used_bytes"] > 1024**3
    allocator = mine["allocator"]["devices"][0]
    assert allocator["allocated_bytes"] > 8 * 4096 * 4096 * 4  # at least the fp32 weights
    assert mine["gpu_memory"][0]["used_memory_bytes"] >= allocator["reserved_bytes"]
    record = Path(os.environ.get("JUPYTER_GPU_RECORD_DIR", tmp_path))
    record.mkdir(parents=True, exist_ok=True)
    devices = await get(jp_fetch, "devices")
    for name, body in (("devices", devices), ("telemetry", telemetry), ("kernels", kernels)):
        (record / f"{name}.json").write_text(json.dumps(body, indent=1))
    await run_cell(kernel, "_trainer.join()")
