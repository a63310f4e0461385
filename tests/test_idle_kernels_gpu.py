"""Idle kernels on a real GPU (issue #14): a notebook that allocated 20 GiB and went idle is
flagged, free cache gives its cached memory back to the driver (NVML's used memory drops by what
``memory_reserved()`` held, within 1%), and the culler frees all of it. Prints the figures."""

from __future__ import annotations

import json

import pytest
from support.jupyter_api import get, start_notebook_kernel
from support.kernel_client import run_cell
from support.waiting import wait_for

pytestmark = pytest.mark.gpu

GIB = 1024**3
ALLOCATE = (
    "%load_ext jupyter_gpu\n"
    "import torch\n"
    "x = torch.empty(20 * 2**30, dtype=torch.uint8, device='cuda')\n"
    "torch.cuda.synchronize()\n"
)


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 0.2, "idle_after": 2.0, "idle_min_memory": GIB}


def nvml_used(uuid: str) -> int:
    """Used memory of one GPU as NVML reports it now (memory info v2, as the sampler reads it)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used)
    finally:
        pynvml.nvmlShutdown()


async def flagged_kernel(jp_fetch, kernel_id: str) -> dict:
    async def flagged():
        body = await get(jp_fetch, "kernels")
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        return mine if mine["idle_holding"] and mine["memory_bytes"] >= 20 * GIB else None

    return await wait_for(flagged, timeout=30)


async def test_an_idle_20_gib_notebook_is_flagged_and_free_cache_returns_the_cache(
    jp_fetch, jp_serverapp, kernel_env
):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/big.ipynb")
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await run_cell(kernel, ALLOCATE + "del x")  # the tensor is gone, PyTorch keeps the 20 GiB cached
    reserved = int(await run_cell(kernel, "print(torch.cuda.memory_reserved())"))
    mine = await flagged_kernel(jp_fetch, kernel_id)
    uuid = mine["gpu_memory"][0]["uuid"]
    before = nvml_used(uuid)
    response = await jp_fetch("api", "gpu", "kernels", kernel_id, "free-cache", method="POST", body="{}")
    reply = json.loads(response.body)
    after = nvml_used(uuid)
    print(
        f"reserved {reserved} B; free cache freed {reply['freed_bytes']} B; "
        f"NVML used {before} -> {after} B (drop {before - after} B)"
    )
    assert reply["cuda_in_use"] is True and reply["freed_bytes"] == reserved
    assert reserved >= 20 * GIB
    assert abs((before - after) - reserved) <= 0.01 * reserved


class TestCullerOnAGpu:
    @pytest.fixture
    def gpu_monitor_config(self, gpu_monitor_config):
        return {
            **gpu_monitor_config,
            "cull_idle_after": 5.0,
            "cull_min_memory": GIB,
            "cull_warn_before": 0.0,
            "cull_interval": 0.5,
        }

    async def test_the_culler_frees_all_of_it(self, jp_fetch, jp_serverapp, gpu_monitor, kernel_env):
        await jp_serverapp.extension_manager.start_all_extensions()  # the culler's periodic check
        kernel_id = await start_notebook_kernel(jp_fetch, "course/big.ipynb")
        kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
        # a CUDA context first, so that the GPU's use without this kernel can be told apart
        await run_cell(kernel, "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()")

        async def on_gpu():
            body = await get(jp_fetch, "kernels")
            mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
            return mine["gpu_memory"] or None

        [row] = await wait_for(on_gpu, timeout=30)
        uuid = row["uuid"]
        baseline = nvml_used(uuid) - row["used_memory_bytes"]  # the GPU without this kernel
        await run_cell(kernel, ALLOCATE)  # 20 GiB in a live tensor: only a shutdown frees it
        held = (await flagged_kernel(jp_fetch, kernel_id))["memory_bytes"]

        async def culled():
            return kernel_id not in jp_serverapp.kernel_manager.list_kernel_ids()

        await wait_for(culled, timeout=60)

        async def released():
            return nvml_used(uuid) <= baseline + 0.01 * held

        await wait_for(released, timeout=30)
        print(f"the kernel held {held} B; NVML used {baseline + held} -> {nvml_used(uuid)} B after the cull")
