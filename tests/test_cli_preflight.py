"""``jupyter gpu preflight`` as users run it: its refusal on a machine without a GPU (warmup's
too), the pieces that run without a GPU (the all-reduce ranks through torch.distributed.elastic,
the verdict and its text), and on a GPU machine a bandwidth that agrees with a torchrun timing of
the same transfer; JSON a script can rely on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.cli import ENV, cli, cli_together, no_gpu_only, one_line_error
from support.paths import ROOT

jsonschema = pytest.importorskip("jsonschema")

PREFLIGHT_SCHEMA = {
    "type": "object",
    "required": ["ok", "verdict", "torch", "cuda", "gpus", "all_reduce"],
    "properties": {
        "ok": {"type": "boolean"},
        "verdict": {"type": "string"},
        "gpus": {
            "type": "array",
            "items": {"type": "object", "required": ["index", "name", "capability", "matmul", "ok", "error"]},
        },
        "all_reduce": {
            "type": ["object", "null"],
            "required": [
                "ok",
                "error",
                "backend",
                "world_size",
                "size_bytes",
                "iterations",
                "nccl_version",
                "seconds",
                "algorithm_bandwidth_gbps",
                "bus_bandwidth_gbps",
            ],
        },
    },
}


# -- a machine without a GPU ----------------------------------------------------------------------


@no_gpu_only
def test_preflight_and_warmup_refuse_without_gpu():
    text, as_json, warmup, warmup_json = cli_together(
        ("preflight",), ("preflight", "--json"), ("warmup",), ("warmup", "--json")
    )
    assert text.returncode == 3
    line = one_line_error(text)
    assert line.startswith("jupyter gpu preflight: preflight cannot run: No GPU: ")
    assert line.endswith("Run `jupyter gpu doctor` for the fix.")
    assert as_json.returncode == 3
    report = json.loads(as_json.stdout)
    jsonschema.validate(report, PREFLIGHT_SCHEMA)
    assert report["ok"] is False and report["verdict"].startswith("No GPU: ") and report["gpus"] == []
    assert warmup.returncode == 3
    assert one_line_error(warmup).startswith("jupyter gpu warmup: nothing to warm. No GPU: ")
    assert warmup_json.returncode == 3
    assert json.loads(warmup_json.stdout) == {
        "ok": False,
        "reason": report["verdict"],
        "sections": [],
        "notes": [],
    }


# -- pieces of preflight that run without a GPU ---------------------------------------------------


def test_allreduce_runs_ranks_through_torch_distributed_elastic():
    """The launch preflight uses, on 2 CPU ranks with gloo: c10d on port 0, spawn, sums checked."""
    pytest.importorskip("torch")
    from jupyter_gpu.cli.allreduce import measure

    result = measure(2, backend="gloo", size_bytes=1 << 20, iterations=3, warmup=1, timeout_s=60)
    assert result.ok, result.error
    assert result.world_size == 2 and result.seconds > 0
    assert result.bus_bandwidth_gbps == pytest.approx(result.algorithm_bandwidth_gbps)  # 2(n-1)/n = 1


PLANTED = "import pathlib\npathlib.Path({marker!r}).write_text('ran as you')\nraise SystemExit(1)\n"


def test_allreduce_ranks_ignore_modules_planted_in_the_working_directory(tmp_path, monkeypatch):
    """`jupyter gpu preflight` run from /tmp: spawned ranks put their working directory first on
    sys.path, and another user's multiprocessing/ there ran as the caller."""
    pytest.importorskip("torch")
    import multiprocessing  # noqa: F401 -- imported before the chdir, as the CLI has by then

    from jupyter_gpu.cli.allreduce import measure

    marker = tmp_path / "marker"
    (tmp_path / "shared" / "multiprocessing").mkdir(parents=True)
    (tmp_path / "shared" / "multiprocessing" / "__init__.py").write_text(PLANTED.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path / "shared")
    result = measure(2, backend="gloo", size_bytes=1 << 10, iterations=1, warmup=0, timeout_s=60)
    assert not marker.exists()
    assert result.ok, result.error
    assert os.getcwd() == str(tmp_path / "shared")


def test_allreduce_listens_on_loopback_only():
    """torch's own rendezvous store listens on every interface, without auth, and torch
    unpickles what it holds: the preflight's ranks bootstrap from a loopback store instead."""
    pytest.importorskip("torch")
    import threading

    import psutil

    from jupyter_gpu.cli.allreduce import measure

    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:  # the launcher installs signal handlers: it must run on the main thread
        me = psutil.Process()
        while not done.is_set():
            for proc in [me, *me.children(recursive=True)]:
                try:
                    seen.update(
                        c.laddr.ip for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN
                    )
                except psutil.NoSuchProcess:
                    continue
            done.wait(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = measure(2, backend="gloo", size_bytes=1 << 20, iterations=50, warmup=1, timeout_s=60)
    finally:
        done.set()
        watcher.join()
    assert result.ok, result.error
    assert seen, "the store never showed up as a listener"
    assert seen <= {"127.0.0.1", "::1"}, seen


def test_a_failing_rank_is_named_with_its_error(monkeypatch):
    pytest.importorskip("torch")
    from jupyter_gpu.cli.allreduce import measure

    result = measure(2, backend="no-such-backend", size_bytes=1 << 10, iterations=1, warmup=0, timeout_s=60)
    assert not result.ok
    assert result.error.startswith("rank ") and "no-such-backend" in result.error, result.error


def _gpu(index: int, errors: dict[str, float | None]) -> dict:
    from jupyter_gpu.cli.preflight import DTYPES

    matmul = {
        name: (
            {"ok": None, "relative_error": None, "tolerance": DTYPES[name].tolerance, "skipped": "old GPU"}
            if error is None
            else {
                "ok": error <= DTYPES[name].tolerance,
                "relative_error": error,
                "tolerance": DTYPES[name].tolerance,
                "skipped": None,
            }
        )
        for name, error in errors.items()
    }
    return {
        "index": index,
        "name": "NVIDIA H200",
        "capability": "9.0",
        "memory_total_bytes": 150 * 2**30,
        "memory_free_bytes": 149 * 2**30,
        "matmul": matmul,
        "error": None,
        "ok": all(c["ok"] is not False for c in matmul.values()),
    }


def test_preflight_verdict_names_each_problem():
    from jupyter_gpu.cli.preflight import render, verdict

    good = {"fp64": 1e-15, "fp32": 1e-7, "tf32": 4e-4, "fp16": 3e-4, "bf16": 2e-3}
    gpus = [_gpu(0, good), _gpu(1, {**good, "bf16": 0.9})]
    ar = {
        "ok": True,
        "error": None,
        "backend": "nccl",
        "world_size": 2,
        "size_bytes": 256 * 2**20,
        "iterations": 20,
        "nccl_version": "2.27.5",
        "seconds": 0.0014,
        "algorithm_bandwidth_gbps": 191.7,
        "bus_bandwidth_gbps": 191.7,
    }
    ok, text = verdict(gpus, ar, None)
    assert not ok and text == "NOT READY: GPU 1: wrong matmul in bf16"
    ok, text = verdict(gpus[:1], ar, 300.0)
    assert not ok and "bus bandwidth 191.7 GB/s is below --min-busbw 300" in text
    ok, text = verdict(gpus[:1], ar, 100.0)
    assert (
        ok
        and text
        == "READY: 1 GPU computed correctly in every dtype; NCCL all-reduce at 191.7 GB/s bus bandwidth"
    )
    report = {
        "ok": False,
        "verdict": "NOT READY: ...",
        "torch": "2.11.0",
        "cuda": "13.0",
        "gpus": [gpus[1], _gpu(2, {**good, "tf32": None, "bf16": None})],
        "all_reduce": ar,
    }
    lines = render(report).splitlines()
    assert lines[1].startswith(
        "GPU 1  NVIDIA H200  sm_90  149 GiB free of 150 GiB  matmul fp64 fp32 tf32 fp16 bf16:WRONG"
    )
    assert lines[1].endswith("worst error 9.0e-01 (bf16)  FAIL")
    assert "(no tf32, bf16 on this GPU)" in lines[2] and lines[2].endswith("PASS")
    assert lines[3] == (
        "all-reduce across 2 GPUs (NCCL 2.27.5): 256 MiB in 1.400 ms: "
        "algorithm bandwidth 191.7 GB/s, bus bandwidth 191.7 GB/s"
    )
    assert lines[-1] == "NOT READY: ..."


# -- on a GPU machine -----------------------------------------------------------------------------


@pytest.mark.gpu
def test_preflight_bandwidth_agrees_with_a_torchrun_timing_of_the_same_transfer():
    size_mib, iterations = 256, 20
    done = cli("preflight", "--json", "--size-mib", str(size_mib), "--iters", str(iterations), timeout=600)
    report = json.loads(done.stdout)
    jsonschema.validate(report, PREFLIGHT_SCHEMA)
    assert done.returncode == 0 and report["ok"], report["verdict"]
    for gpu in report["gpus"]:
        assert all(c["ok"] for c in gpu["matmul"].values() if c["skipped"] is None), gpu
    print(report["verdict"])
    count = len(report["gpus"])
    if count < 2:
        assert report["all_reduce"] is None
        pytest.skip("one GPU: no all-reduce to compare")
    ours = report["all_reduce"]
    assert ours["ok"] and ours["world_size"] == count and ours["size_bytes"] == size_mib * 2**20
    reference = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={count}",
            str(ROOT / "tests" / "support" / "allreduce_reference.py"),
            str(size_mib * 2**20),
            str(iterations),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    seconds = json.loads(reference.stdout.strip().splitlines()[-1])["seconds"]
    busbw = size_mib * 2**20 / seconds / 1e9 * 2 * (count - 1) / count
    print(
        f"all-reduce {size_mib} MiB on {count} GPUs: preflight {ours['bus_bandwidth_gbps']:.1f} GB/s bus "
        f"({ours['seconds'] * 1e3:.3f} ms), torchrun + CUDA events {busbw:.1f} GB/s ({seconds * 1e3:.3f} ms)"
    )
    assert ours["bus_bandwidth_gbps"] == pytest.approx(busbw, rel=0.35)
