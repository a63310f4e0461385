"""``jupyter gpu status`` as users run it: a subprocess, its exit code and JSON a script can rely
on, against real Jupyter servers replaying H200 readings (simulated NVML), against servers that
do not answer or answer something else, from NVML on this machine (a machine without a GPU, a
lost GPU), and on a GPU machine against nvidia-smi."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest
from support.cli import ENV, cli, gpu_status, no_gpu_only, one_line_error
from support.machine import nvidia_smi
from support.paths import READINGS
from support.simulated_gpu import kernel_on_gpu

jsonschema = pytest.importorskip("jsonschema")

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
        "problem": {
            "enum": [
                None,
                "library_not_found",
                "driver_not_loaded",
                "no_permission",
                "version_mismatch",
                "no_devices",
                "other",
            ]
        },
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


# -- servers that do not answer, or answer something else -----------------------------------------


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


# -- a machine without a GPU ----------------------------------------------------------------------


@no_gpu_only
def test_status_without_gpu_says_what_is_wrong_then_the_fix_wrapped_to_the_terminal():
    done = cli("status", "--no-server", env={**ENV, "COLUMNS": "72"})
    assert done.returncode == 3
    body = json.loads(cli("status", "--no-server", "--json").stdout)
    jsonschema.validate(body, STATUS_SCHEMA)
    assert body["available"] is False and body["problem"] == "library_not_found"
    assert body["source"] == {"kind": "nvml", "url": None, "simulated": False}
    what, fix = done.stdout.strip().split("\n  fix: ")
    assert what.startswith("No GPU (from NVML on this machine): no NVIDIA driver found")
    assert all(len(line) <= 72 for line in done.stdout.splitlines()), done.stdout
    assert len(fix.splitlines()) > 1 and all(line.startswith("       ") for line in fix.splitlines()[1:])
    # the words are the reply's: what is wrong and the fix, each said once
    said = " ".join(done.stdout.split()).replace(" fix: ", " ", 1)
    assert said.casefold() == f"No GPU (from NVML on this machine): {body['reason']}".casefold()


# -- status against real Jupyter servers ----------------------------------------------------------


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
    # and says why: the server's one kernel has not loaded the extension that would claim it
    assert "not visible from here: NVML numbers it in another PID namespace" in text
    assert "1 of this server's kernels has not loaded jupyter_gpu" in text


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
    sim.readings["devices"][0]["gpm"]["2"] = 42.4  # SM active, over the reading's window
    sim.lose_gpu(1)
    monkeypatch.setattr(jupyter_gpu.nvml, "NvmlReader", lambda: NvmlReader(sim))
    status = from_nvml()
    jsonschema.validate(status, STATUS_SCHEMA)
    assert [g["state"] for g in status["gpus"]] == ["ok", "lost"]
    assert status["gpus"][0]["memory_used_bytes"] == 3222077440 and status["kernels"] is None
    assert [p["pid"] for p in status["processes"]] == [564]
    lines = render(status).splitlines()
    assert lines[0] == "GPUs from NVML on this machine; driver 580.159.04, CUDA 13.0"
    assert lines[2].split()[:4] == ["GPU", "Name", "Util", "SM"]
    assert lines[3].split()[3:7] == ["0", "%", "42", "%"]  # Util 0 %, SM 42 %
    assert lines[4].split()[:2] == ["1", "LOST"] and "stopped answering" in lines[4]
    assert lines[-1] == "(no Jupyter server asked, so no notebooks: pass --url to name one)"


# -- on a GPU machine -----------------------------------------------------------------------------


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
