"""On a real GPU machine: the figures JupyterLab's page brings for the status bar (#32) are the
GPU's own, as nvidia-smi reads them, and new: memory another process takes shows in the next page."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from support.jupyter_api import check_reply, page_config, start_extensions, with_server_app
from support.machine import nvidia_smi
from support.waiting import holds, wait_for

from jupyter_gpu.server.page_config import PAGE_CONFIG_KEY

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Extension endpoints without")]
MIB = 1024**2
TAKEN = 4 * 1024**3
# Another process takes the memory, so that this one (the server's) never holds a CUDA context.
HOLDER = f"""
import sys, torch
block = torch.empty({TAKEN}, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("taken", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 0.2, "slow_interval": 1.0}


@pytest.fixture
def jp_server_config(jp_server_config: dict) -> dict:
    """JupyterLab beside the extension: its page is the one that carries the sample."""
    return with_server_app(jp_server_config, extensions=("jupyterlab",))


async def page_sample(jp_fetch) -> dict:
    reply = json.loads((await page_config(jp_fetch, "lab"))[PAGE_CONFIG_KEY])
    check_reply("telemetry", reply)
    assert reply["available"] and reply["state"] == "ok"
    return reply["latest"]


async def test_the_pages_figures_are_the_gpus_and_follow_its_memory(jp_fetch, gpu_monitor):
    await start_extensions(gpu_monitor)
    await wait_for(holds(gpu_monitor.sampler.latest), what="the first real sample")
    before = await page_sample(jp_fetch)
    smi = nvidia_smi("uuid,memory.total,memory.used")
    assert [g["uuid"] for g in before["gpus"]] == [row[0] for row in smi]
    for gpu, (_, total, used) in zip(before["gpus"], smi):
        assert abs(gpu["memory_used_bytes"] - float(used) * MIB) <= 0.01 * float(total) * MIB

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert (await asyncio.to_thread(holder.stdout.readline)).strip() == "taken"

        async def taken() -> dict | None:
            latest = await page_sample(jp_fetch)
            grown = latest["gpus"][0]["memory_used_bytes"] - before["gpus"][0]["memory_used_bytes"]
            return latest if grown >= 0.9 * TAKEN else None

        after = await wait_for(taken, timeout=15, what="a page showing the 4 GiB another process took")
        assert after["t"] > before["t"]
        used = float(nvidia_smi("memory.used")[0][0]) * MIB
        assert abs(after["gpus"][0]["memory_used_bytes"] - used) <= 0.01 * float(smi[0][1]) * MIB
    finally:
        holder.kill()
        holder.wait()
