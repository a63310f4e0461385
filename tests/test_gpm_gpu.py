"""On a real Hopper GPU: the server's GPM figures tell a tensor-core matmul loop from a loop of
tiny kernels that NVML's utilisation calls just as busy, agree with nvidia-smi's own GPM reading
(`nvidia-smi dmon --gpm-metrics`), and reach /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from support.jupyter_api import get
from support.prometheus_text import parse
from support.waiting import wait_for

pytestmark = pytest.mark.gpu
SECONDS = 8
WORKLOADS = {
    # tensor cores: a bf16 matmul loop
    "bf16_matmul": """
x = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
def step():
    for _ in range(8):
        x @ x
""",
    # one SM at a time: 2000 tiny adds replayed as a CUDA graph, back to back
    "tiny_kernels": """
x = torch.zeros(256, device="cuda:0")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    x.add_(1.0)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    for _ in range(2000):
        x.add_(1.0)
step = graph.replay
""",
}
RUN = """
import time, torch
{body}
step(); torch.cuda.synchronize()
print("running", flush=True)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    step(); torch.cuda.synchronize()
"""


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": 0.5}


def _gpu0(sample: dict) -> dict:
    return next(g for g in sample["gpus"] if g["index"] == 0)


def _dmon(seconds: int) -> subprocess.Popen:
    """nvidia-smi's own GPM reading of GPU 0, once a second: SM active (2), any tensor (5)."""
    return subprocess.Popen(
        [
            "nvidia-smi",
            "dmon",
            "-i",
            "0",
            "--gpm-metrics",
            "2,5",
            "-c",
            str(seconds),
            "--format",
            "csv,nounit",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _dmon_rows(out: str) -> list[dict[str, float]]:
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0].lstrip("#").split(",")]
    rows = []
    for line in lines[1:]:
        cells = dict(zip(header, (c.strip() for c in line.split(","))))
        try:
            rows.append({k: float(cells[k]) for k in ("smutil", "mmaact")})
        except (KeyError, ValueError):
            continue  # a first row before GPM has two samples ("-")
    return rows


async def _during(jp_fetch, workload: str) -> tuple[list[dict], list[dict]]:
    """Run one workload; the server's samples of GPU 0 wholly inside it, and nvidia-smi's."""
    worker = subprocess.Popen(
        [sys.executable, "-c", RUN.format(body=WORKLOADS[workload], seconds=SECONDS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline().strip() == "running"
        start = time.time() + 0.6  # the first sample wholly inside: one interval on
        smi = _dmon(SECONDS - 3)
        assert worker.wait(120) == 0
        smi_out = smi.communicate(timeout=30)[0]
    finally:
        worker.kill()
    end = time.time()
    body = await get(jp_fetch, "telemetry", since=start)
    samples = [_gpu0(s) for s in body["history"] if s["t"] < end - 0.6]
    assert len(samples) >= 6, body["history"]
    print(workload, json.dumps(samples[len(samples) // 2]), smi_out)
    return samples, _dmon_rows(smi_out)


def _mean(samples: list[dict], field: str) -> float:
    return sum(g[field] for g in samples) / len(samples)


async def _first_figures(jp_fetch) -> dict | None:
    body = await get(jp_fetch, "telemetry")
    gpu = body["latest"] and _gpu0(body["latest"])
    return (
        gpu
        if gpu and (gpu["sm_active_percent"] is not None or "sm_active_percent" in gpu["unsupported"])
        else None
    )


async def test_tensor_cores_and_tiny_kernels_are_told_apart(jp_fetch, gpu_monitor):
    gpu = await wait_for(lambda: _first_figures(jp_fetch), timeout=15)
    assert gpu["sm_active_percent"] is not None, f"no GPM on this GPU: {gpu['unsupported']}"
    matmul, matmul_smi = await _during(jp_fetch, "bf16_matmul")
    tiny, tiny_smi = await _during(jp_fetch, "tiny_kernels")
    # NVML's utilisation calls both busy
    assert _mean(matmul, "utilization_gpu_percent") >= 90 and _mean(tiny, "utilization_gpu_percent") >= 90
    # ...but only the matmuls keep the SMs and tensor cores busy
    assert _mean(matmul, "tensor_active_percent") > 50 and _mean(matmul, "tensor_hmma_active_percent") > 50
    assert _mean(matmul, "sm_active_percent") > 80
    assert _mean(tiny, "sm_active_percent") < 20 and _mean(tiny, "tensor_active_percent") < 1
    # nvidia-smi's own GPM reading says the same
    assert matmul_smi and tiny_smi
    smi_sm = sum(r["smutil"] for r in matmul_smi) / len(matmul_smi)
    smi_tensor = sum(r["mmaact"] for r in matmul_smi) / len(matmul_smi)
    assert smi_sm == pytest.approx(_mean(matmul, "sm_active_percent"), abs=10)
    assert smi_tensor == pytest.approx(_mean(matmul, "tensor_active_percent"), abs=10)
    assert max(r["smutil"] for r in tiny_smi) < 20
    print(
        json.dumps(
            {
                "bf16_matmul": {
                    f: _mean(matmul, f)
                    for f in ("utilization_gpu_percent", "sm_active_percent", "tensor_active_percent")
                },
                "tiny_kernels": {
                    f: _mean(tiny, f)
                    for f in ("utilization_gpu_percent", "sm_active_percent", "tensor_active_percent")
                },
                "nvidia_smi_bf16": {"sm": smi_sm, "tensor": smi_tensor},
            }
        )
    )


async def test_nvlink_and_metrics(jp_fetch, gpu_monitor):
    gpu = await wait_for(lambda: _first_figures(jp_fetch), timeout=15)
    count = len((await get(jp_fetch, "devices"))["devices"])
    for field in ("nvlink_rx_bytes_per_second", "nvlink_tx_bytes_per_second"):
        # nothing crosses NVLink with no all-reduce running (on one GPU, there is no peer at all)
        assert gpu[field] == 0 or field in gpu["unsupported"], (field, gpu)
    families = parse((await jp_fetch("metrics")).body.decode())
    sm = {s.labels["gpu"]: s.value for s in families["jupyter_gpu_sm_active_ratio"][1]}
    assert "0" in sm and 0 <= sm["0"] <= 1
    print(json.dumps({"gpus": count, "nvlink": {k: gpu[k] for k in gpu if k.startswith("nvlink")}}))
