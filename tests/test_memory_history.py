"""Memory by notebook over time (issue #16): the history keeps each GPU's processes (bounded), the
telemetry reply names the notebook of each attributed process, and the simulated backend replays
a recorded trace that moves."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.jupyter_api import check_reply, get, start_notebook_kernel
from support.paths import READINGS
from support.waiting import wait_for, wait_until

from jupyter_gpu.nvml import NvmlReader
from jupyter_gpu.nvml.simulated import SimulatedNVML
from jupyter_gpu.server.owners import OwnerMemo, owners_of
from jupyter_gpu.server.sampler import HISTORY_PROCESSES, Sampler

GIB = 1024**3
TRACE = Path(__file__).parent.parent / "jupyter_gpu" / "nvml" / "h200_trace.json"


def test_the_packaged_trace_moves_and_loops():
    trace = json.loads(TRACE.read_text())
    nvml = SimulatedNVML(trace)
    frames = trace["trace"]["frames"]
    seen = set()
    for i in range(len(frames) + 1):
        nvml._started = time.monotonic() - (i + 0.5) * trace["trace"]["frame_seconds"]  # i frames played
        nvml._initialised = 1
        seen.add((nvml.nvmlDeviceGetUtilizationRates(0).gpu, nvml.nvmlDeviceGetMemoryInfo(0, 2).used))
    assert len(seen) >= 4, "the replayed GPU 0 hardly changes"
    assert (0, frames[0][0]["memory_v2"]["used"]) in seen  # looped back to the start
    # the training process comes (a model loaded) and goes (the run ended): the stacked chart moves
    holding = [bool(f[0]["compute_processes"]) for f in frames]
    assert not holding[0] and not holding[-1] and any(holding)
    assert TRACE.stat().st_size < 64 * 1024  # kept small: it ships in the package


def test_history_keeps_the_largest_processes_of_each_gpu():
    readings = json.loads(READINGS.read_text())
    readings["devices"][0]["compute_processes"] = [
        {"pid": 1000 + i, "used_gpu_memory": i * 1024**2} for i in range(HISTORY_PROCESSES + 8)
    ]
    sampler = Sampler(
        lambda: NvmlReader(SimulatedNVML(readings)),
        interval=0.02,
        slow_interval=0.5,
        history_seconds=1,
        retry_interval=0.05,
        verify_pids=False,
    )
    sampler.start()
    try:
        sample = wait_until("a sample", sampler.latest)
    finally:
        sampler.stop()
    kept = json.loads(sample.json_history)["gpus"][0]["processes"]
    assert len(kept) == HISTORY_PROCESSES
    assert min(p["pid"] for p in kept) == 1008  # the 8 smallest are left out
    assert len(json.loads(sample.json_full)["gpus"][0]["processes"]) == HISTORY_PROCESSES + 8


def test_owner_memo_remembers_shut_down_kernels_and_is_bounded():
    def payload(kernel_id: str, pid: int) -> dict:
        return {
            "kernels": [
                {
                    "id": kernel_id,
                    "name": "python3",
                    "path": f"{kernel_id}.ipynb",
                    "gpu_memory": [{"gpu_index": 0, "pids": [pid, pid + 1]}],
                }
            ]
        }

    memo = OwnerMemo(limit=3)
    memo.update(payload("a", 10))
    memo.update(payload("b", 20))  # kernel a is gone from the view; its PIDs stay until pushed out
    assert [(o["pid"], o["path"]) for o in memo.reply()] == [
        (11, "a.ipynb"),
        (20, "b.ipynb"),
        (21, "b.ipynb"),
    ]
    assert owners_of(None) == {}


async def test_the_history_names_the_notebook_that_holds_memory(jp_fetch, gpu_monitor):
    kernel_id = await start_notebook_kernel(jp_fetch, "course/week2/big.ipynb")
    pid = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    gpu_monitor.simulated_nvml.readings["devices"][0]["compute_processes"].append(
        {"pid": pid, "used_gpu_memory": 30 * GIB}
    )

    async def named():
        await gpu_monitor.kernels.refresh()  # what the server's periodic refresh does every 5 s
        body = await get(jp_fetch, "telemetry")
        return body if any(o["pid"] == pid for o in body["owners"]) else None

    body = await wait_for(named, timeout=10)
    check_reply("telemetry", body)
    owner = next(o for o in body["owners"] if o["pid"] == pid)
    assert owner == {"pid": pid, "kernel_id": kernel_id, "name": "python3", "path": "course/week2/big.ipynb"}
    held, listed = [], []
    for sample in body["history"]:  # a full reply leaves out lists that repeat the sample before
        listed = sample["gpus"][0].get("processes", listed)
        held += [p["used_memory_bytes"] for p in listed if p["pid"] == pid]
    assert held and held[-1] == 30 * GIB
