"""``%%gpu_profile`` asks its Jupyter server what the GPU really did while the cell ran: a real
jupyter_server whose simulated H200 is launch-bound (NVML's utilisation 99%, GPM's SM activity
0.4%) and a real kernel of it, whose CPU torch answers CUDA's questions as a kernel on that H200
would (``support.fake_torch.FAKE_CUDA_IN_TORCH``; CI has no GPU)."""

from __future__ import annotations

import json
import re

import pytest
from support import fake_torch
from support.fake_torch import FAKE_CUDA_IN_TORCH, FakeCuda
from support.jupyter_api import notebook
from support.paths import READINGS

from jupyter_gpu.kernel import gpm_samples

pytest.importorskip("torch")

INTERVAL = 0.2
STARVED = "busy by NVML's utilisation, but the SMs are mostly idle"


def three_samples(folder) -> str:
    """A profiled cell that runs until the server has stamped three samples that began after it
    did (a poll with a deadline, so that a slow machine cannot make it too short for a figure)."""
    return (
        f"%%gpu_profile --trace {folder}\n"
        "import time\n"
        "from jupyter_gpu.client import discover\n"
        "began, server = time.time(), discover()[0]\n"
        f"while len(server.get('api/gpu/telemetry?since=%f' % (began + {INTERVAL}))['history']) < 3:\n"
        "    assert time.time() < began + 60, 'the server stamped no samples'\n"
        "    time.sleep(0.05)\n"
    )


@pytest.fixture
def gpu_monitor_config(tmp_path):
    """The two H200s, GPU 0 running a CUDA graph of tiny kernels as the H200 read one (in NVML's
    GPM units: percent), sampled every INTERVAL seconds."""
    readings = json.loads(READINGS.read_text())
    gpu0 = readings["devices"][0]
    gpu0["gpm"].update({"2": 0.4, "3": 0.1, "5": 0.0, "6": 0.0, "7": 0.0, "9": 0.0, "10": 0.3})
    gpu0["utilization"]["gpu"] = 99
    path = tmp_path / "launch_bound_h200.json"
    path.write_text(json.dumps(readings))
    return {
        "backend": "simulated",
        "simulated_readings": str(path),
        "interval": INTERVAL,
        "slow_interval": 1.0,
        "retry_interval": 0.1,
    }


def report(cell) -> tuple[str, str]:
    (shown,) = [m["content"]["data"] for m in cell.messages if m["msg_type"] == "display_data"]
    return shown["text/plain"], shown["text/html"]


async def test_a_profiled_cell_shows_what_the_gpu_did_and_the_hint(
    jp_fetch, jp_serverapp, kernel_env, tmp_path
):
    async with notebook(jp_fetch, jp_serverapp) as (_, cells):
        before = await cells.run(f"%%gpu_profile --trace {tmp_path}\nimport torch\nx = torch.ones(3) + 1")
        assert before.ok, before.traceback
        assert "SM active" not in report(before)[0]  # CUDA not initialised: no GPU used, none asked

        assert (await cells.run(FAKE_CUDA_IN_TORCH)).ok
        cell = await cells.run(three_samples(tmp_path))
        assert cell.ok, cell.traceback
        text, html = report(cell)
        line = re.search(
            r"cuda:0 activity +while the cell ran \(the server's samples of the whole GPU, (\d+) × 0.2 s\): (.*)",
            text,
        )
        assert line is not None, text
        assert int(line[1]) >= 3
        assert line[2] == "utilisation 99%, SM active 0.4% (occupancy 0.1%), tensor cores 0.0% (HMMA 0.0%)"
        assert f"[WARN] {STARVED}: cuda:0" in text and "NVML's utilisation 99% but SM active 0.4%" in text
        assert "SM active 0.4% (occupancy 0.1%)" in html and "WARN" in html

        short = await cells.run(f"%%gpu_profile --trace {tmp_path}\ny = torch.ones(2)")
        assert short.ok, short.traceback
        text, _ = report(short)
        (said,) = [row for row in text.splitlines() if "SM and tensor-core activity" in row]
        assert "none for a cell of 0.0 s: the server samples every 0.2 s" in said and STARVED not in text


def test_a_kernel_that_has_not_initialised_cuda_asks_nothing(monkeypatch):
    cuda = FakeCuda(initialized=False)
    fake_torch.install(monkeypatch, cuda)
    assert gpm_samples.cell_devices([0]) == {}
    assert gpm_samples.read_activity(0.0, 1.0, [0]) is None
    assert set(cuda.calls) == {"is_initialized"}  # nothing that would initialise CUDA


def test_the_gpus_of_the_cell_are_those_of_its_trace_else_the_current_one(monkeypatch):
    cuda = FakeCuda()
    fake_torch.install(monkeypatch, cuda)
    assert gpm_samples.cell_devices([1]) == {1: f"GPU-{fake_torch.UUID1}"}
    assert cuda.calls["current_device"] == 0
    assert gpm_samples.cell_devices([]) == {0: f"GPU-{fake_torch.UUID0}"}


def test_without_a_server_there_are_no_figures(monkeypatch, tmp_path):
    fake_torch.install(monkeypatch, FakeCuda())
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))  # no jpserver file: no server
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert gpm_samples.read_activity(0.0, 1.0, [0]) is None
