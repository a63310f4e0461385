"""Make the simulated backend's replay trace from real GPU readings.

    python benchmarks/record_trace.py derive tests/fixtures/h200_api/telemetry.json \\
        --devices tests/fixtures/h200_api/devices.json --out trace.json
    python benchmarks/record_trace.py record --seconds 150 --out jupyter_gpu/nvml/h200_trace.json

``derive`` turns a recorded ``GET api/gpu/telemetry`` reply into a trace. Replies recorded before
the history kept processes (the 2xH200 one in tests/fixtures) list processes only in ``latest``:
each of those processes is then given, per sample, what the GPU's used memory leaves for it after
the processes listed before it (the latest's order) and the latest's unattributed remainder;
the trace says it was derived so.

``record`` (on a GPU machine; tests/test_record_trace_gpu.py runs it) samples the GPUs with
jupyter_gpu's own sampler while a PyTorch training loop runs on each GPU in phases (load a model,
train in bf16, grow the batch, a launch-bound loop of tiny kernels, free, idle), then writes the
samples as a trace, GPM's figures included where the GPUs have GPM. Both keep the file small:
at most ``--frames`` frames (evenly thinned), figures rounded as NVML gives them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

from jupyter_gpu.nvml.fields import GPM_METRICS  # noqa: E402 (after the path)


def _frame_gpu(gpu: dict[str, Any], processes: list[dict[str, Any]]) -> dict[str, Any]:
    """One GPU of one API sample in the pynvml-shaped fields SimulatedNVML replays."""
    used, reserved = gpu["memory_used_bytes"], gpu["memory_reserved_bytes"]
    total = gpu["memory_total_bytes"]
    return {
        "utilization": {"gpu": gpu["utilization_gpu_percent"], "memory": gpu["utilization_memory_percent"]},
        "temperature_c": gpu["temperature_celsius"],
        "power_mw": round(gpu["power_watts"] * 1000),
        "clock_sm_mhz": gpu["clock_sm_mhz"],
        "clock_mem_mhz": gpu["clock_mem_mhz"],
        "pcie_rx_kbs": (gpu["pcie_rx_bytes_per_second"] or 0) // 1024,
        "pcie_tx_kbs": (gpu["pcie_tx_bytes_per_second"] or 0) // 1024,
        "memory_v2": {
            "version": 33554472,
            "total": total,
            "reserved": reserved,
            "used": used,
            "free": total - used - reserved,
        },
        "compute_processes": [
            {"pid": p["pid"], "used_gpu_memory": p["used_memory_bytes"]} for p in processes
        ],
        **({"gpm": _gpm(gpu)} if gpu.get("sm_active_percent") is not None else {}),
    }


def _gpm(gpu: dict[str, Any]) -> dict[str, float]:
    """A sample's GPM figures as NVML gives them (by metric id; percent, MiB/s)."""
    return {
        str(metric.metric_id): round(gpu[metric.name] / metric.scale, 3)
        for metric in GPM_METRICS
        if gpu.get(metric.name) is not None
    }


def _derived_processes(gpu: dict[str, Any], latest_gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """Processes for a sample without a process list, from the latest's (see the module doc)."""
    listed = latest_gpu.get("processes") or []
    left = gpu["memory_used_bytes"] - (
        latest_gpu["memory_used_bytes"] - sum(p["used_memory_bytes"] or 0 for p in listed)
    )
    out = []
    for p in listed:
        share = min(p["used_memory_bytes"] or 0, left)
        if share > 0:
            out.append({"pid": p["pid"], "used_memory_bytes": share})
            left -= share
    return out


def _thin(samples: list[dict[str, Any]], frames: int) -> list[dict[str, Any]]:
    if len(samples) <= frames:
        return samples
    step = len(samples) / frames
    return [samples[int(i * step)] for i in range(frames)]


def trace_from_reply(
    reply: dict[str, Any], devices: dict[str, Any], *, frames: int, source: str
) -> dict[str, Any]:
    """A SimulatedNVML readings file with a trace, from a telemetry reply and a devices reply."""
    samples = [s for s in reply["history"] if all(g["state"] == "ok" for g in s["gpus"])]
    # GPM's figures are averages since the sample before: a GPU's first sample has none
    if any(g.get("sm_active_percent") is not None for s in samples for g in s["gpus"]):
        samples = [s for s in samples if all(g.get("sm_active_percent") is not None for g in s["gpus"])]
    latest = reply["latest"]
    derived = not any("processes" in g for s in samples for g in s["gpus"])
    # PCIe arrives on a slower cadence: a sample before the first reading takes the first one
    first_pcie: dict[int, dict[str, Any]] = {}
    for s in samples:
        for g in s["gpus"]:
            if g["pcie_rx_bytes_per_second"] is not None:
                first_pcie.setdefault(g["index"], g)
    trace_frames = []
    for s in _thin(samples, frames):
        frame = []
        for g, last in zip(s["gpus"], latest["gpus"]):
            if g["pcie_rx_bytes_per_second"] is None and g["index"] in first_pcie:
                g = {
                    **g,
                    **{
                        k: first_pcie[g["index"]][k]
                        for k in ("pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second")
                    },
                }
            processes = _derived_processes(g, last) if derived else (g.get("processes") or [])
            frame.append(_frame_gpu(g, processes))
        trace_frames.append(frame)
    span = samples[-1]["t"] - samples[0]["t"]
    recorded_step = span / max(1, len(samples) - 1)
    base = []
    for d, g in zip(devices["devices"], latest["gpus"]):
        base.append(
            {
                "index": d["index"],
                "name": d["name"],
                "uuid": d["uuid"],
                "pci_bus_id": d["pci_bus_id"],
                "power_limit_mw": round(d["power_limit_watts"] * 1000),
                "mig_mode": [int(d["mig_mode"]["current"]), int(d["mig_mode"]["pending"])],
                "ecc_volatile_uncorrected": 0,
                "fan": {"error": "NVMLError_NotSupported", "msg": "Not Supported"},
                "perf_state": 0,
                "clocks_event_reasons": 0,
                "field_values": {"NVML_FI_DEV_MEMORY_TEMP": g["temperature_celsius"]},
                **{k: v for k, v in trace_frames[-1][d["index"]].items() if k != "compute_processes"},
                "memory": {  # NVML's v1 figures, a fallback the reader uses only without v2
                    "total": g["memory_total_bytes"],
                    "used": g["memory_used_bytes"] + g["memory_reserved_bytes"],
                    "free": g["memory_free_bytes"],
                },
                "compute_processes": [],
            }
        )
    cuda = devices.get("cuda_driver_version") or "13.0"
    major, minor = (int(x) for x in str(cuda).split("."))
    return {
        "about": f"Replay of {len(samples)} samples over {span:.1f} s recorded by {source}; "
        f"{len(trace_frames)} frames, each played for frame_seconds (recorded {recorded_step:.2f} s apart)."
        + (
            " Per-process memory derived from the latest sample's processes (see benchmarks/record_trace.py)."
            if derived
            else ""
        ),
        "driver_version": devices["driver_version"],
        "cuda_driver_version": major * 1000 + minor * 10,
        "devices": base,
        "trace": {"frame_seconds": 1.0, "frames": trace_frames},
    }


def record(seconds: float, interval: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sample the real GPUs with jupyter_gpu's sampler while a training loop runs on each."""
    from jupyter_gpu.nvml import NvmlReader
    from jupyter_gpu.server.sampler import Sampler
    from jupyter_gpu.server.telemetry import devices_payload

    sampler = Sampler(
        NvmlReader, interval=interval, slow_interval=2.0, history_seconds=seconds + 60, retry_interval=1.0
    )
    sampler.start()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "train.py"
        script.write_text(TRAIN.format(seconds=seconds))
        worker = subprocess.Popen([sys.executable, str(script)])
        try:
            worker.wait(timeout=seconds + 120)
        finally:
            worker.kill()
        time.sleep(2 * interval)  # the last idle samples
    sampler.stop()
    samples = sampler.since(None)
    reply = {
        "latest": {"t": samples[-1].t, "gpus": list(samples[-1].gpus)},
        "history": [{"t": s.t, "gpus": list(s.gpus)} for s in samples],
    }
    status = sampler.status
    devices = devices_payload(status, simulated=False)
    devices["cuda_driver_version"] = status.system.get("cuda_driver_version")
    return reply, devices


# A training run in phases, one process per GPU, so memory, utilisation, power and PCIe all move.
TRAIN = """
import time, torch, torch.multiprocessing as mp

def run(rank, seconds):
    dev = torch.device('cuda', rank)
    time.sleep(3 + 4 * rank)                      # idle, then start staggered
    model = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(8)]).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    end = time.time() + seconds * 0.7
    batch = 512
    while time.time() < end:
        x = torch.randn(batch, 8192, pin_memory=True).to(dev, non_blocking=True)
        with torch.autocast('cuda', torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        if time.time() > end - seconds * 0.3:
            batch = 4096                          # a bigger batch: more memory, more power
    torch.cuda.synchronize(dev)
    # a launch-bound loop: tiny kernels back to back (a CUDA graph), so NVML's utilisation reads
    # ~100% while GPM's SM activity stays under 1%
    x = torch.zeros(256, device=dev)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(dev)
    with torch.cuda.stream(side):
        x.add_(1.0)
    torch.cuda.current_stream(dev).wait_stream(side)
    with torch.cuda.graph(graph):
        for _ in range(2000):
            x.add_(1.0)
    tiny_end = time.time() + seconds * 0.1
    while time.time() < tiny_end:
        graph.replay()
        torch.cuda.synchronize(dev)
    del model, opt, graph
    torch.cuda.empty_cache()
    time.sleep(seconds * 0.1)                     # freed, idle again

if __name__ == '__main__':
    mp.spawn(run, args=({seconds},), nprocs=torch.cuda.device_count())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    derive = sub.add_parser("derive", help="a trace from a recorded telemetry reply")
    derive.add_argument("telemetry", type=Path)
    derive.add_argument("--devices", type=Path, required=True)
    rec = sub.add_parser("record", help="record the GPUs of this machine during a training run")
    rec.add_argument("--seconds", type=float, default=180)
    rec.add_argument("--interval", type=float, default=1.0)
    for p in (derive, rec):
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--frames", type=int, default=300, help="at most this many frames (kept small)")
    args = parser.parse_args()
    if args.command == "derive":
        reply, devices = json.loads(args.telemetry.read_text()), json.loads(args.devices.read_text())
        source = f"jupyter_gpu ({args.telemetry.name})"
    else:
        reply, devices = record(args.seconds, args.interval)
        source = "benchmarks/record_trace.py record during a PyTorch training run"
    trace = trace_from_reply(reply, devices, frames=args.frames, source=source)
    args.out.write_text(json.dumps(trace, separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(trace['trace']['frames'])} frames, {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
