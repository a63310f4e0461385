"""Record the simulated backend's replay trace on a GPU machine (issue #16): a few minutes of a
PyTorch training run on every GPU, sampled by jupyter_gpu's own sampler. Run on the GPU machine
with

    JUPYTER_GPU_RECORD_DIR=out python -m pytest -m gpu tests/test_record_trace_gpu.py -s

and it leaves ``out/h200_trace.json`` to bring back and package (without the variable it writes
to a temporary file and only checks the recording).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]


def test_record_a_training_trace(tmp_path):
    import subprocess

    record = Path(os.environ.get("JUPYTER_GPU_RECORD_DIR", tmp_path))
    record.mkdir(parents=True, exist_ok=True)
    out = record / "h200_trace.json"
    seconds = float(os.environ.get("JUPYTER_GPU_TRACE_SECONDS", "180"))
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "record_trace.py"),
            "record",
            f"--seconds={seconds:g}",
            f"--out={out}",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads(out.read_text())
    frames = trace["trace"]["frames"]
    print(result.stdout, trace["about"])
    assert len(frames) >= seconds * 0.5  # about one frame a second, thinned to at most 300
    assert out.stat().st_size < 512 * 1024  # small enough to ship in the package
    for index in range(len(trace["devices"])):
        util = {f[index]["utilization"]["gpu"] for f in frames}
        used = [f[index]["memory_v2"]["used"] for f in frames]
        assert max(util) >= 50 and min(util) <= 5, f"GPU {index} never trained or never idled: {sorted(util)}"
        assert max(used) - min(used) > 1024**3, f"GPU {index}'s memory hardly moved"
        assert any(f[index]["compute_processes"] for f in frames), f"GPU {index} lists no process"
        # GPM on Hopper: the bf16 training runs on the tensor cores (a few % of the time: its
        # batches come from the host, so the loop is input-bound, as the recording on the H200
        # showed), and the launch-bound phase is busy by NVML's utilisation while its SMs idle
        gpm = [(f[index]["utilization"]["gpu"], f[index]["gpm"]) for f in frames]
        assert max(g["2"] for _, g in gpm) > 30, f"GPU {index}: SMs never busy"
        assert max(g["7"] for _, g in gpm) > 1, f"GPU {index}: bf16 never on the tensor cores"
        assert any(util >= 90 and g["2"] < 20 for util, g in gpm), f"GPU {index}: no launch-bound phase"
