"""A real Jupyter server with real kernels that load jupyter_gpu: the agent's file lands where the
server reads it, and (on a GPU) an out-of-memory error names the notebook that holds the memory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.jupyter_api import start_notebook_kernel
from support.kernel_client import execute

from jupyter_gpu.server.kernel_stats import read_kernel_stats


async def poll(check, timeout: float = 20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.1)


async def test_agent_file_is_read_by_the_server(jp_fetch, jp_serverapp, kernel_env):
    kernel_id = await start_notebook_kernel(jp_fetch, "work/analysis.ipynb")
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    cell = await execute(kernel, "%load_ext jupyter_gpu\nimport torch\nprint(torch.cuda.is_initialized())")
    assert cell.traceback == "" and cell.stream().strip() == "False"
    stats = await poll(lambda: read_kernel_stats(jp_serverapp.runtime_dir, kernel_id).stats)
    assert stats["pid"] == kernel.provisioner.pid
    assert stats["cuda_in_use"] is False and stats["devices"] == []

    def a_later_write():
        later = read_kernel_stats(jp_serverapp.runtime_dir, kernel_id).stats
        return later if later and later["time"] > stats["time"] else None

    await poll(a_later_write)  # the agent ran again with torch imported...
    cell = await execute(kernel, "print(torch.cuda.is_initialized())")
    assert cell.stream().strip() == "False"  # ...and did not initialise CUDA
    await jp_serverapp.kernel_manager.shutdown_kernel(kernel_id)
    assert read_kernel_stats(jp_serverapp.runtime_dir, kernel_id).stats is None
    path = Path(jp_serverapp.runtime_dir) / f"jupyter_gpu-kernel-{kernel_id}.json"
    await poll(lambda: not path.exists())


async def test_oom_explanation_comes_after_the_traceback(jp_fetch, jp_serverapp, kernel_env):
    kernel = jp_serverapp.kernel_manager.get_kernel(await start_notebook_kernel(jp_fetch, "oom.ipynb"))
    message = "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 3.00 GiB is free."
    cell = await execute(
        kernel, f"%load_ext jupyter_gpu\nimport torch\nraise torch.OutOfMemoryError({message!r})"
    )
    assert "OutOfMemoryError" in cell.traceback and message in cell.traceback
    assert "Asked for 20.0 GiB; the GPU had 3.00 GiB free of 140 GiB." in cell.stream()
    outputs = [m["msg_type"] for m in cell.messages if m["msg_type"] in ("error", "stream")]
    assert outputs == ["error", "stream"]


@pytest.mark.gpu
@pytest.mark.parametrize("gpu_monitor_config", [{"backend": "nvml", "interval": 0.2, "slow_interval": 1.0}])
async def test_oom_names_the_notebook_holding_the_gpu(jp_fetch, jp_serverapp, kernel_env, gpu_monitor_config):
    manager = jp_serverapp.kernel_manager
    hog = manager.get_kernel(await start_notebook_kernel(jp_fetch, "team/hog.ipynb"))
    held = await execute(
        hog,
        (
            "import torch\n"
            "free, total = torch.cuda.mem_get_info(0)\n"
            "_x = torch.empty(int(free * 0.8), dtype=torch.uint8, device='cuda:0'); torch.cuda.synchronize()\n"
            "print('held')"
        ),
    )
    assert held.stream().strip() == "held", held.traceback
    victim_id = await start_notebook_kernel(jp_fetch, "me/victim.ipynb")
    victim = manager.get_kernel(victim_id)
    cell = await execute(
        victim,
        (
            "%load_ext jupyter_gpu\n"
            "import torch\n"
            "y = torch.empty(torch.cuda.mem_get_info(0)[1] // 2, dtype=torch.uint8, device='cuda:0')"
        ),
    )
    assert "OutOfMemoryError" in cell.traceback  # the original traceback is still there
    assert "jupyter_gpu: why CUDA ran out of memory on GPU 0" in cell.stream()
    assert "notebook team/hog.ipynb" in cell.stream()

    def oom_recorded():  # files written before the cell's OOM (even after CUDA started) lack it
        stats = read_kernel_stats(jp_serverapp.runtime_dir, victim_id).stats
        return stats if stats and any(d["num_ooms"] >= 1 for d in stats["devices"]) else None

    stats = await poll(oom_recorded)
    assert stats["cuda_in_use"] is True
    print(cell.stream())
