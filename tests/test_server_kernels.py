"""Kernels, their notebooks and the GPU memory their process trees hold; Prometheus labels."""

from __future__ import annotations

import os

from support.jupyter_api import get, start_notebook_kernel
from support.kernel_client import run_cell
from support.simulated_gpu import GIB, kernel_on_gpu
from support.waiting import wait_for


async def test_kernel_process_tree_is_joined_with_its_notebook(jp_fetch, gpu_monitor, children):
    kernel_id, kernel_pid, child = await kernel_on_gpu(jp_fetch, gpu_monitor, children)

    async def attributed():
        body = await get(jp_fetch, "kernels")
        mine = [k for k in body["kernels"] if k["id"] == kernel_id]
        return body if mine and mine[0]["gpu_memory"] else None

    body = await wait_for(attributed, timeout=10)
    kernel = next(k for k in body["kernels"] if k["id"] == kernel_id)
    assert kernel["path"] == "course/week1/train.ipynb"
    assert kernel["pid"] == kernel_pid
    assert kernel["name"] == "python3"
    assert kernel["gpu_memory"] == [
        {
            "gpu_index": 1,
            "uuid": "GPU-d57917b3-7a1d-3f45-579e-d0c856ed9f9d",
            "used_memory_bytes": 3 * GIB,
            "pids": [kernel_pid, child],
        }
    ]
    others = {row["pid"]: row for row in body["unattributed"]}
    assert others[os.getpid()]["used_memory_bytes"] == 3 * GIB
    assert "pytest" in others[os.getpid()]["command"]
    assert 564 in others and others[564]["gpu_index"] == 0


async def test_prometheus_exposes_gpu_and_kernel_figures(jp_fetch, gpu_monitor, children):
    kernel_id, _, _ = await kernel_on_gpu(jp_fetch, gpu_monitor, children)
    await wait_for(lambda: _kernel_has_memory(jp_fetch, kernel_id), timeout=10)
    text = (await jp_fetch("metrics")).body.decode()
    uuid0 = 'gpu="0",uuid="GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5"'
    assert f"jupyter_gpu_memory_used_bytes{{{uuid0}}} 3.22207744e+09" in text
    assert f"jupyter_gpu_power_watts{{{uuid0}}} 123.82" in text
    assert f"jupyter_gpu_sm_clock_hertz{{{uuid0}}} 1.98e+09" in text
    assert f"jupyter_gpu_utilization_ratio{{{uuid0}}} 0.0" in text
    assert "jupyter_gpu_available 1.0" in text
    assert "jupyter_gpu_fan" not in text  # unsupported fields are absent, not zero
    line = next(ln for ln in text.splitlines() if ln.startswith("jupyter_gpu_kernel_memory_used_bytes{"))
    assert f'kernel_id="{kernel_id}"' in line and 'notebook_path="course/week1/train.ipynb"' in line
    assert float(line.rsplit(" ", 1)[1]) == 3 * GIB


async def _kernel_has_memory(jp_fetch, kernel_id):
    body = await get(jp_fetch, "kernels")
    return any(k["id"] == kernel_id and k["gpu_memory"] for k in body["kernels"])


async def test_kernel_without_gpu_memory_is_listed_with_none(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "cpu-only.ipynb")
    body = await get(jp_fetch, "kernels")
    kernel = next(k for k in body["kernels"] if k["id"] == kernel_id)
    assert kernel["path"] == "cpu-only.ipynb" and kernel["gpu_memory"] == []


async def test_a_kernel_with_the_extension_reports_no_cuda_in_use(jp_fetch, gpu_monitor, kernel_env):
    kernel_id = await start_notebook_kernel(jp_fetch, "lesson.ipynb")
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    await run_cell(kernel, "%load_ext jupyter_gpu\nimport torch")

    async def published():
        body = await get(jp_fetch, "kernels")
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        return mine if mine["allocator"] else None

    mine = await wait_for(published, timeout=15)
    assert mine["path"] == "lesson.ipynb"
    assert mine["allocator"]["cuda_in_use"] is False and mine["allocator"]["devices"] == []
    assert mine["allocator_state"] == "no_cuda" and "not initialised CUDA" in mine["allocator_reason"]
    assert mine["allocator"]["pid"] == kernel.provisioner.pid
    # the agent looked at torch without initialising CUDA
    assert (await run_cell(kernel, "print(torch.cuda.is_initialized())")).strip() == "False"
    await run_cell(kernel, "%unload_ext jupyter_gpu")

    async def withdrawn():
        body = await get(jp_fetch, "kernels")
        mine = next(k for k in body["kernels"] if k["id"] == kernel_id)
        return mine if mine["allocator"] is None else None

    mine = await wait_for(withdrawn, timeout=10)
    assert mine["allocator_state"] == "no_stats" and "not loaded" in mine["allocator_reason"]
