"""``jupyter gpu`` as users run it: subprocesses, exit codes, JSON a script can rely on, and
``status`` against real Jupyter servers replaying H200 readings (simulated NVML)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest
from support.cli import ENV, cli, cli_together, gpu_status, one_line_error
from support.machine import HAS_GPU, nvidia_smi
from support.paths import READINGS, ROOT
from support.simulated_gpu import kernel_on_gpu

jsonschema = pytest.importorskip("jsonschema")

no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="checks the verdicts of a machine without a GPU")

NULLABLE_STR = {"type": ["string", "null"]}
NULLABLE_NUM = {"type": ["number", "null"]}
STATUS_SCHEMA = {
    "type": "object",
    "required": [
        "source",
        "available",
        "reason",
        "driver_version",
        "cuda_driver_version",
        "gpus",
        "processes",
        "kernels",
        "hidden_processes",
        "notes",
    ],
    "properties": {
        "source": {
            "type": "object",
            "required": ["kind", "url", "simulated"],
            "properties": {
                "kind": {"enum": ["nvml", "server"]},
                "url": NULLABLE_STR,
                "simulated": {"type": "boolean"},
            },
        },
        "available": {"type": "boolean"},
        "reason": NULLABLE_STR,
        "gpus": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "index",
                    "uuid",
                    "name",
                    "state",
                    "utilization_gpu_percent",
                    "memory_used_bytes",
                    "memory_total_bytes",
                    "temperature_celsius",
                    "power_watts",
                    "power_limit_watts",
                ],
                "properties": {
                    "index": {"type": "integer"},
                    "state": {"enum": ["ok", "lost"]},
                    "memory_used_bytes": {"type": ["integer", "null"]},
                    "power_watts": NULLABLE_NUM,
                },
            },
        },
        "processes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "gpu_index",
                    "pid",
                    "used_memory_bytes",
                    "kernel_id",
                    "notebook",
                    "command",
                    "user",
                ],
                "properties": {
                    "pid": {"type": "integer"},
                    "kernel_id": NULLABLE_STR,
                    "notebook": NULLABLE_STR,
                },
            },
        },
        "kernels": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": [
                    "id",
                    "notebook",
                    "pid",
                    "execution_state",
                    "idle_seconds",
                    "idle_holding",
                    "gpu_memory",
                    "allocator",
                ],
            },
        },
        "hidden_processes": {"type": ["integer", "null"]},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}
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


# -- arguments and entry points -----------------------------------------------------------------


def test_jupyter_finds_the_subcommand(tmp_path):
    """`jupyter gpu` runs the `jupyter-gpu` script pip installs (CI installs the package);
    from a bare checkout, a stand-in for that script on PATH."""
    env = ENV
    if shutil.which("jupyter-gpu") is None:
        shim = tmp_path / "jupyter-gpu"
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m jupyter_gpu "$@"\n')
        shim.chmod(0o755)
        env = dict(ENV, PATH=f"{tmp_path}{os.pathsep}{ENV['PATH']}")
    done = subprocess.run(["jupyter", "gpu", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "{status,doctor,warmup,preflight,grafana}" in done.stdout and "3 no usable GPU" in done.stdout


def test_help_names_the_magics_as_typed_in_a_notebook():
    """argparse %-formats help lines but not descriptions: '%%' must appear only where it is formatted."""
    doctor, top = cli("doctor", "--help").stdout, cli("--help").stdout
    assert "The checklist of %gpu_doctor:" in doctor
    assert "run %gpu_warmup's steps" in top
    assert "%%" not in doctor + top


@pytest.mark.parametrize(
    "args, message",
    [
        ((), None),
        (("status", "--url", "localhost:8888"), "give the server's address"),
        (("status", "--token", "abc"), "--token goes with --url"),
        (("status", "--url", "http://127.0.0.1:1/", "--no-server"), "contradict"),
        (("preflight", "--iters", "0"), "--iters must be at least 1"),
        (("preflight", "--size-mib", "lots"), "invalid int value"),
        (("teleport",), "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    done = cli(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    if message:
        assert message in done.stderr.strip().splitlines()[-1]


def test_a_server_that_does_not_answer_is_one_line_and_exit_1():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = cli("status", "--url", f"http://127.0.0.1:{port}/")
    assert done.returncode == 1
    assert one_line_error(done).startswith(f"jupyter gpu status: cannot reach http://127.0.0.1:{port}/")


def test_a_server_answering_something_else_is_one_line_and_exit_1():
    """Another service at the URL, answering JSON of another shape: named, never a traceback."""

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"available": True, "latest": {"gpus": [1]}, "kernels": ["x"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    with http.server.HTTPServer(("127.0.0.1", 0), Other) as other:
        threading.Thread(target=other.serve_forever, daemon=True).start()
        done = cli("status", "--url", f"http://127.0.0.1:{other.server_port}/")
        other.shutdown()
    assert done.returncode == 1
    assert "answered in a shape this jupyter gpu does not know" in one_line_error(done)


# -- a machine without a GPU ----------------------------------------------------------------


@no_gpu_only
def test_status_without_gpu_says_why_in_one_line():
    done = cli("status", "--no-server")
    assert done.returncode == 3
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("No GPU (from NVML on this machine): ")
    body = json.loads(cli("status", "--no-server", "--json").stdout)
    jsonschema.validate(body, STATUS_SCHEMA)
    assert body["available"] is False and body["reason"] == lines[0].split(": ", 1)[1]
    assert body["source"] == {"kind": "nvml", "url": None, "simulated": False}


@no_gpu_only
def test_doctor_fails_with_exit_1_and_the_same_report_as_json():
    done = cli("doctor", "--json", "--no-server")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["cuda_ready"] is False and report["status"] == "fail"
    assert report["verdict"].startswith("No GPU: ")
    assert any(c["status"] == "fail" and c["fix"] for c in report["checks"])


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


# -- status against real Jupyter servers --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str, method: str = "GET", body: dict | None = None) -> dict:
    request = urllib.request.Request(
        url,
        method=method,
        headers={"Authorization": f"token {token}"},
        data=json.dumps(body).encode() if body is not None else None,
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`jupyter server` in its own process, as a workshop host starts it, NVML simulated."""
    home = tmp_path_factory.mktemp("server")
    (home / "course").mkdir()
    env = dict(
        ENV,
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
    )
    port, token = _free_port(), "workshop-token"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--ServerApp.jpserver_extensions=jupyter_gpu=True",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            "--ServerApp.allow_root=True",
            "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={home}",
            "--ServerApp.base_url=/hub/user/alice/",
            "--GPUMonitor.backend=simulated",
            f"--GPUMonitor.simulated_readings={READINGS}",
            "--GPUMonitor.interval=0.2",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://localhost:{port}/hub/user/alice/"  # as the server writes it in its runtime file
    kernel_pid = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(url + "api/gpu/telemetry", token).get("latest"):
                    break
            except OSError:
                pass
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the server did not start within 60 s"
            time.sleep(0.2)
        session = _get(
            url + "api/sessions",
            token,
            "POST",
            {"path": "course/week1.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
        )
        kernel_pid = next(k["pid"] for k in _get(url + "api/gpu/kernels", token)["kernels"])
        yield {"url": url, "token": token, "env": env, "kernel_id": session["kernel"]["id"], "home": home}
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        _kill_if_ours(kernel_pid, str(home))  # a server killed hard leaves its kernels behind


def _kill_if_ours(pid: int | None, marker: str) -> None:
    """Kill the server's kernel if it outlived the server (its command line names our dir)."""
    try:
        process = psutil.Process(pid) if pid else None
        if process is not None and marker in " ".join(process.cmdline()):
            process.kill()
    except psutil.Error:
        pass


def test_status_finds_the_running_server_and_lists_notebooks(server):
    """No --url: the server is found in the runtime dir, with its base_url and token."""
    done = cli("status", "--json", env=server["env"])
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    jsonschema.validate(status, STATUS_SCHEMA)
    assert status["source"] == {"kind": "server", "url": server["url"], "simulated": True}
    assert [g["name"] for g in status["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert status["gpus"][0]["memory_total_bytes"] == 150754820096
    assert status["driver_version"] == "580.159.04"
    [kernel] = status["kernels"]
    assert kernel["notebook"] == "course/week1.ipynb" and kernel["id"] == server["kernel_id"]
    assert kernel["gpu_memory"] == [] and kernel["allocator"] is None
    # The replayed processes exist on no machine here: shown, never guessed to be anyone's.
    assert {p["pid"] for p in status["processes"]} >= {564}
    assert all(p["kernel_id"] is None for p in status["processes"])

    text = cli("status", env=server["env"]).stdout
    assert text.startswith(f"GPUs from {server['url']}, SIMULATED readings; driver 580.159.04, CUDA 13.0")
    assert "NVIDIA H200" in text and "140 GiB" in text
    assert "course/week1.ipynb" in text and "not reported (%load_ext jupyter_gpu in it)" in text
    assert "not visible from here" in text


def test_status_with_a_wrong_token_explains_the_403(server):
    done = cli("status", "--url", server["url"], "--token", "wrong", env=server["env"])
    assert done.returncode == 1
    assert "refused the request (HTTP 403): pass the server's token with --token" in one_line_error(done)


async def test_status_names_the_notebook_whose_kernel_holds_gpu_memory(
    jp_fetch,
    jp_serverapp,
    jp_http_port,
    jp_base_url,
    gpu_monitor,
    children,
):
    """A real kernel of a real server holds (simulated) memory on GPU 1 with a child process."""
    kernel_id, kernel_pid, child = await kernel_on_gpu(jp_fetch, gpu_monitor, children)
    await asyncio.sleep(0.3)  # a few samples of the simulated readings that now list them
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    token = jp_serverapp.identity_provider.token
    results = [await gpu_status(url, token, *extra, env=ENV) for extra in (["--json"], [])]
    status = json.loads(results[0])
    jsonschema.validate(status, STATUS_SCHEMA)
    mine = [p for p in status["processes"] if p["kernel_id"] == kernel_id]
    assert {(p["gpu_index"], p["pid"]) for p in mine} == {(1, kernel_pid), (1, child)}
    assert {p["notebook"] for p in mine} == {"course/week1/train.ipynb"}
    [kernel] = [k for k in status["kernels"] if k["id"] == kernel_id]
    assert kernel["gpu_memory"] == [{"gpu_index": 1, "used_memory_bytes": 3 * 2**30}]
    tester = next(p for p in status["processes"] if p["pid"] == os.getpid())
    assert tester["kernel_id"] is None and "pytest" in tester["command"]

    text = results[1]
    row = next(line for line in text.splitlines() if f" {kernel_pid} " in line)
    assert row.split()[0] == "1" and "2.00 GiB" in row
    assert row.endswith(f"course/week1/train.ipynb (kernel {kernel_id[:8]})")
    assert "3.00 GiB on GPU 1" in text


def test_status_from_nvml_here_shows_a_lost_gpu_as_a_state(monkeypatch):
    """The local path (no server) over simulated NVML: one GPU fallen off the bus, one fine."""
    import jupyter_gpu.nvml
    from jupyter_gpu.cli.status import from_nvml, render
    from jupyter_gpu.nvml import NvmlReader
    from jupyter_gpu.nvml.simulated import SimulatedNVML

    sim = SimulatedNVML.from_file(READINGS)
    sim.lose_gpu(1)
    monkeypatch.setattr(jupyter_gpu.nvml, "NvmlReader", lambda: NvmlReader(sim))
    status = from_nvml()
    jsonschema.validate(status, STATUS_SCHEMA)
    assert [g["state"] for g in status["gpus"]] == ["ok", "lost"]
    assert status["gpus"][0]["memory_used_bytes"] == 3222077440 and status["kernels"] is None
    assert [p["pid"] for p in status["processes"]] == [564]
    lines = render(status).splitlines()
    assert lines[0] == "GPUs from NVML on this machine; driver 580.159.04, CUDA 13.0"
    assert lines[4].split()[:2] == ["1", "LOST"] and "stopped answering" in lines[4]
    assert lines[-1] == "(no Jupyter server asked, so no notebooks: pass --url to name one)"


# -- pieces of preflight that run without a GPU --------------------------------------------------


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


# -- on a GPU machine --------------------------------------------------------------------------


@pytest.mark.gpu
def test_status_agrees_with_nvidia_smi():
    done = cli("status", "--no-server", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(done.stdout)
    jsonschema.validate(status, STATUS_SCHEMA)
    smi = nvidia_smi("index,uuid,name,memory.total")
    assert [(g["index"], g["uuid"], g["name"]) for g in status["gpus"]] == [
        (int(i), u, n) for i, u, n, _ in smi
    ]
    for gpu, row in zip(status["gpus"], smi):
        assert gpu["memory_total_bytes"] // 2**20 == pytest.approx(int(row[3]), abs=1)
    assert "NVIDIA" in cli("status", "--no-server").stdout


@pytest.mark.gpu
def test_doctor_and_warmup_pass_on_every_gpu():
    doctor, warmup, as_json = cli_together(
        ("doctor", "--json", "--no-server"), ("warmup",), ("warmup", "--json"), timeout=300
    )
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and report["cuda_ready"], report["verdict"]
    assert warmup.returncode == 0, warmup.stdout + warmup.stderr
    count = len(nvidia_smi("index"))
    assert all(f"cuda:{i} " in warmup.stdout for i in range(count)) and "FAILED" not in warmup.stdout
    warm = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and warm["ok"] and len(warm["sections"]) == count
    assert all(
        step["error"] is None and step["ms"] > 0 for section in warm["sections"] for step in section["steps"]
    )


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
