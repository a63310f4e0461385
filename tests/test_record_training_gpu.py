"""Record what a real server answers over a few minutes of notebooks training on a GPU (issue #16:
the pictures of the README and the docs drawn from a real run). Run on the GPU machine with

    JUPYTER_GPU_RECORD_DIR=out JUPYTER_GPU_RECORD_SECONDS=120 python -m pytest -m gpu tests/test_record_training_gpu.py

and ``out/h200_training/`` holds the replies (devices, telemetry with its history, kernels, the
training notebook's cells) that tests/browser/test_recorded_h200.py draws the panel and the
dashboard from. Two notebooks of the server: one trains in phases (load, train, a bigger batch,
free), the other holds 6 GiB and stays idle, so memory is stacked by notebook.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.jupyter_api import get, get_cells, start_notebook_kernel
from support.kernel_client import run_cell
from support.waiting import wait_for

pytestmark = pytest.mark.gpu
SECONDS = float(os.environ.get("JUPYTER_GPU_RECORD_SECONDS", "30"))
GIB = 1024**3


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 1.0, "slow_interval": 2.0, "history_seconds": 3600}


def phase(seconds: float, batch: int) -> str:
    return (
        "import time\n"
        f"_end = time.time() + {seconds:.1f}\n"
        "while time.time() < _end:\n"
        f"    x = torch.randn({batch}, 8192, device='cuda')\n"
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "        loss = model(x).float().pow(2).mean()\n"
        "    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)\n"
        "torch.cuda.synchronize()\n"
    )


async def test_record_notebooks_training_for_the_pictures(jp_fetch, gpu_monitor, kernel_env, tmp_path):
    async def sampling():
        body = await get(jp_fetch, "telemetry")
        return body if body["available"] and body["latest"] else None

    await wait_for(sampling, timeout=15)
    manager = gpu_monitor.serverapp.kernel_manager
    idle_id = await start_notebook_kernel(jp_fetch, "course/week1/intro.ipynb")
    await run_cell(
        manager.get_kernel(idle_id),
        "%load_ext jupyter_gpu\nimport torch\nkept = torch.empty(6 * 1024**3, dtype=torch.uint8, device='cuda')",
    )
    train_id = await start_notebook_kernel(jp_fetch, "course/week3/finetune.ipynb")
    trainer = manager.get_kernel(train_id)
    await run_cell(trainer, "%load_ext jupyter_gpu\nimport torch")
    await run_cell(
        trainer,
        "model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(8)]).cuda()\n"
        "opt = torch.optim.AdamW(model.parameters())",
    )
    await run_cell(trainer, phase(SECONDS * 0.45, 512))
    await run_cell(trainer, phase(SECONDS * 0.3, 4096))
    await run_cell(trainer, "del model, opt, x, loss\nimport gc; gc.collect(); torch.cuda.empty_cache()")

    async def settled():  # the freed memory has reached a sample
        body = await get(jp_fetch, "kernels")
        mine = next(k for k in body["kernels"] if k["id"] == train_id)
        used = sum(row["used_memory_bytes"] for row in mine["gpu_memory"])
        return body if used < 2 * GIB else None

    kernels = await wait_for(settled, timeout=15)
    telemetry = await get(jp_fetch, "telemetry")
    devices = await get(jp_fetch, "devices")

    async def every_cell():  # the timeline file is published at most once a second
        body = await get_cells(jp_fetch, train_id)
        return body if len(body["cells"]) >= 4 else None  # the %load_ext cell itself has no start

    cells = await wait_for(every_cell, timeout=15)
    record = Path(os.environ.get("JUPYTER_GPU_RECORD_DIR", tmp_path)) / "h200_training"
    record.mkdir(parents=True, exist_ok=True)
    for name, body in (
        ("devices", devices),
        ("telemetry", telemetry),
        ("kernels", kernels),
        ("cells", cells),
    ):
        (record / f"{name}.json").write_text(json.dumps(body, separators=(",", ":")))

    history = telemetry["history"]
    busy = [s["gpus"][0]["utilization_gpu_percent"] or 0 for s in history]
    assert max(busy) >= 50 and busy[-1] <= 10, busy  # it trained, then stopped
    used = [s["gpus"][0]["memory_used_bytes"] for s in history]
    assert max(used) - used[-1] > 8 * GIB  # the model and its optimizer came and went
    idle = next(k for k in kernels["kernels"] if k["id"] == idle_id)
    assert sum(row["used_memory_bytes"] for row in idle["gpu_memory"]) >= 6 * GIB
    assert [c["outcome"] for c in cells["cells"]] == ["ok"] * 4

    print(
        f"{len(history)} samples over {history[-1]['t'] - history[0]['t']:.0f} s; busy at most {max(busy)}%"
    )
