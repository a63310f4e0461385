"""On a GPU: the per-cell timeline's figures agree with torch's own and with nvidia-smi, and an
out-of-memory error names the cell that holds the most. A real server (real NVML), a real kernel.

The cells reply is saved (to $JUPYTER_GPU_RECORD_DIR when set) for the browser test, which draws
the timeline from it on a machine with a browser.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from support.jupyter_api import get, get_cells, notebook
from support.machine import nvidia_smi
from support.waiting import wait_for

pytestmark = pytest.mark.gpu
GiB = 1024**3
MIB = 1024**2


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 0.2, "slow_interval": 1.0}


def keep(name: str, gib: int) -> str:
    return f"{name} = torch.empty({gib} * 2**30, dtype=torch.uint8, device='cuda')"


async def test_cells_that_keep_1_2_4_gib_and_one_that_frees_8(jp_fetch, jp_serverapp, kernel_env, tmp_path):
    async with notebook(jp_fetch, jp_serverapp) as (kernel_id, cells):
        assert (await cells.run("import torch", "imports")).status == "ok"
        asks = await cells.run("print(torch.cuda.is_initialized())", "asks")
        assert (
            asks.status == "ok" and asks.stream().strip() == "False"
        )  # recording two cells initialised nothing
        for name, gib in (("a", 1), ("b", 2), ("c", 4)):
            assert (await cells.run(keep(name, gib), f"keep-{gib}")).status == "ok"
        assert (await cells.run(keep("t", 8) + "\ndel t", "free-8")).status == "ok"
        # torch's own figures, read after the cells (the timeline never resets the peak)
        figures = await cells.run(
            "print(torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated())", "torch"
        )
        assert figures.status == "ok"
        allocated, peak = map(int, figures.stream().split())
        pid = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid

        async def all_cells():
            body = await get_cells(jp_fetch, kernel_id)
            return body if len(body["cells"]) == 7 else None

        body = await wait_for(all_cells, timeout=30)
    by_id = {c["cell_id"]: c for c in body["cells"]}
    assert by_id["imports"]["gpus"] == [] and by_id["asks"]["gpus"] == []
    for gib in (1, 2, 4):
        (gpu,) = by_id[f"keep-{gib}"]["gpus"]
        assert gpu["allocated_change_bytes"] == pytest.approx(gib * GiB, rel=0.01)
        assert gpu["peak_allocated_bytes"] == pytest.approx(gpu["allocated_bytes"], rel=0.01)
    (freed,) = by_id["free-8"]["gpus"]
    assert abs(freed["allocated_change_bytes"]) <= 0.01 * GiB
    start = freed["allocated_bytes"] - freed["allocated_change_bytes"]
    assert freed["peak_allocated_bytes"] - start == pytest.approx(8 * GiB, rel=0.01)
    assert freed["peak_allocated_bytes"] == peak  # torch's max_memory_allocated(), untouched
    assert by_id["torch"]["gpus"][0]["allocated_bytes"] == allocated
    # The first CUDA cell brought the context: NVML's per-process figures sum to what
    # nvidia-smi says the kernel holds now.
    first = by_id["keep-1"]["gpus"][0]
    assert first["process_change_bytes"] > first["allocated_change_bytes"]
    held = sum(c["gpus"][0]["process_change_bytes"] for c in body["cells"] if c["gpus"])
    smi = {int(row[0]): int(row[1]) * MIB for row in nvidia_smi("pid,used_memory", "compute-apps")}
    assert held == pytest.approx(smi[pid], abs=4 * MIB)
    assert [r["seq"] for r in body["most_left"]][:3] == [by_id[f"keep-{g}"]["seq"] for g in (4, 2, 1)]
    assert body["highest_peaks"][0]["seq"] == by_id["free-8"]["seq"]
    record = Path(os.environ.get("JUPYTER_GPU_RECORD_DIR", tmp_path))
    record.mkdir(parents=True, exist_ok=True)
    (record / "cells.json").write_text(json.dumps(body, indent=1))
    kernels = await get(jp_fetch, "kernels")
    (record / "kernels_with_cells.json").write_text(json.dumps(kernels, indent=1))


async def test_an_oom_names_the_cell_that_holds_the_most(jp_fetch, jp_serverapp, kernel_env):
    async with notebook(jp_fetch, jp_serverapp) as (kernel_id, cells):
        assert (await cells.run("import torch", "imports")).status == "ok"
        assert (await cells.run(keep("small", 1), "small")).status == "ok"
        assert (await cells.run(keep("big", 6), "big")).status == "ok"
        huge = await cells.run("huge = torch.empty(2**40, dtype=torch.uint8, device='cuda')", "huge")
        assert huge.status == "error"
        out = huge.shown

        async def recorded():
            body = await get_cells(jp_fetch, kernel_id)
            return body if len(body["cells"]) == 4 else None

        body = await wait_for(recorded, timeout=30)
    named = re.search(r"left the most allocated on this GPU: (.*)\.", out)
    assert named, out
    big = next(c for c in body["cells"] if c["cell_id"] == "big")
    small = next(c for c in body["cells"] if c["cell_id"] == "small")
    assert named.group(1).startswith(f"cell [{big['execution_count']}] left 6.00 GiB")
    assert f"cell [{small['execution_count']}] left 1.00 GiB" in named.group(1)
    assert body["cells"][-1]["outcome"] == "oom"
