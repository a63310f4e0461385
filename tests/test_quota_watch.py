"""The quota beyond PyTorch (issue #28): a kernel whose process tree holds more GPU memory than
its quota, as NVML counts it (CuPy, a raw cudaMalloc, a process the notebook started), for
``over_limit_grace`` seconds gets ``over_limit_action``, said in a notification. Real server and
kernels; the memory is the simulated GPU's."""

from __future__ import annotations

import asyncio

import pytest
from support.jupyter_api import start_extensions, start_notebook_kernel
from support.kernel_client import run_cell
from support.server_events import recorded
from support.simulated_gpu import hold
from support.waiting import holds, wait_for

from jupyter_gpu.server.quota_watch import EVENT_ID

GIB = 2**30


@pytest.fixture
def told(jp_serverapp) -> list[dict]:
    """The over-limit events, as JupyterLab's event stream gets them."""
    return recorded(jp_serverapp, EVENT_ID)


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config: dict, request) -> dict:
    action = getattr(request, "param", "warn")
    return {
        **gpu_monitor_config,
        "kernel_memory_limit": GIB,
        "over_limit_grace": 1.0,
        "over_limit_action": action,
    }


async def test_a_kernel_over_its_quota_is_warned_once(jp_fetch, gpu_monitor, kernel_env, told):
    await start_extensions(gpu_monitor)
    within = await start_notebook_kernel(jp_fetch, "course/small.ipynb")
    over = await start_notebook_kernel(jp_fetch, "course/cupy.ipynb")
    hold(gpu_monitor, within, 1, GIB // 2)
    hold(gpu_monitor, over, 1, 3 * GIB)
    await wait_for(holds(lambda: len(told) >= 1), 30, what="the over-limit warning")
    (event,) = told
    assert event["kernel_id"] == over and event["action"] == "warn"
    assert event["memory_bytes"] == 3 * GIB and event["limit_bytes"] == GIB and event["gpu_index"] == 1
    assert event["message"].startswith(
        "The kernel of course/cupy.ipynb is over the quota: it held 3.00 GiB on GPU 1 for over 1 s, "
        "more than this server's quota of 1.00 GiB per kernel"
    )
    # still over at the next looks: once per time over, not every refresh
    refreshes = gpu_monitor.kernels.last
    await wait_for(holds(lambda: gpu_monitor.kernels.last is not refreshes), 30, what="another refresh")
    assert len(told) == 1
    assert over in gpu_monitor.serverapp.kernel_manager.list_kernel_ids()  # a warning only


@pytest.mark.parametrize("gpu_monitor_config", ["interrupt"], indirect=True)
async def test_with_interrupt_the_running_cell_is_interrupted(jp_fetch, gpu_monitor, kernel_env, told):
    await start_extensions(gpu_monitor)
    kernel_id = await start_notebook_kernel(jp_fetch, "course/cupy.ipynb")
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    cell = asyncio.ensure_future(
        run_cell(
            kernel,
            "import time\ntry:\n    time.sleep(120)\nexcept KeyboardInterrupt:\n    print('interrupted')",
        )
    )
    hold(gpu_monitor, kernel_id, 1, 3 * GIB)
    assert await asyncio.wait_for(cell, 60) == "interrupted\n"
    assert [e["action"] for e in told] == ["interrupt"]
    assert "was interrupted" in told[0]["message"]
