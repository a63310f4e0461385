"""The one client of the Jupyter server, as a hostile neighbour on a shared machine attacks it.

Every request carries the user's token (or the hub's). A proxy named in the environment, a
server file planted in the runtime dir, a redirect or a flood must never get it or hang us:
tested through the kernel's labelling request (``%gpu_mem``, the out-of-memory explanation)
and ``jupyter gpu status``, against real servers."""

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
from pathlib import Path

import pytest
from support.cli import ENV, cli, one_line_error
from support.jupyter_api import get
from support.kernel_client import run_cell
from support.simulated_gpu import kernel_on_gpu
from support.waiting import wait_for

from jupyter_gpu import client
from jupyter_gpu.client import MAX_REPLY_BYTES, Server, ServerError, discover
from jupyter_gpu.kernel import gpu_memory

UUID1 = "GPU-d57917b3-7a1d-3f45-579e-d0c856ed9f9d"
PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


class Listener:
    """A plain TCP listener on loopback: records every connection made to it, answers nothing."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.received.append(conn.recv(65536))
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def listener():
    listening = Listener()
    yield listening
    listening.close()


@pytest.fixture
def proxied(listener, monkeypatch) -> Listener:
    """Every proxy variable names the listener, and nothing is exempt from it."""
    for name in PROXY_VARIABLES:
        monkeypatch.setenv(name, listener.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    return listener


# -- proxies ------------------------------------------------------------------------------------


async def test_the_labelling_request_of_a_kernel_goes_past_the_proxy(
    jp_fetch,
    gpu_monitor,
    children,
    proxied,
    monkeypatch,
):
    """A real kernel of a real server, its environment full of proxies, names the notebook whose
    kernel holds memory on a GPU as %gpu_mem does; the proxy sees nothing of it."""
    monkeypatch.setenv("PYTHONPATH", ENV["PYTHONPATH"])
    kernel_id, kernel_pid, child = await kernel_on_gpu(jp_fetch, gpu_monitor, children)

    async def attributed():
        body = await get(jp_fetch, "kernels")
        return any(k["id"] == kernel_id and k["gpu_memory"] for k in body["kernels"])

    assert await wait_for(attributed, timeout=10)
    kernel = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id)
    code = (
        "import json, os\nfrom jupyter_gpu.kernel import gpu_memory\n"
        f"print(os.environ['http_proxy'], json.dumps(gpu_memory.server_labels({UUID1!r})))"
    )
    proxy, labels = (await run_cell(kernel, code)).split(" ", 1)
    assert proxy == proxied.url  # the kernel did have the proxies
    notebook = "notebook course/week1/train.ipynb"
    assert json.loads(labels) == {str(kernel_pid): notebook, str(child): notebook}
    assert proxied.received == []


async def test_status_goes_past_the_proxy_found_or_named(
    jp_fetch, jp_serverapp, jp_http_port, jp_base_url, gpu_monitor, proxied
):
    await wait_for(lambda: get(jp_fetch, "telemetry"))
    env = dict(os.environ, PYTHONPATH=ENV["PYTHONPATH"])
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}"
    for args in (["--json"], ["--json", "--url", url, "--token", jp_serverapp.identity_provider.token]):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jupyter_gpu",
            "status",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 0, err.decode()
        status = json.loads(out)
        assert status["source"]["kind"] == "server" and status["source"]["simulated"] is True, args
    assert proxied.received == []


# -- planted server files -----------------------------------------------------------------------


def plant(runtime: Path, listener: Listener, how: str) -> subprocess.Popen | None:
    """A server file naming the attacker's listener and without a token of its own, so that a
    careless client sends JUPYTERHUB_API_TOKEN along. Its PID is a live ancestor of ours (the PID
    of our own shell is in /proc for all to see), or for a file our server left behind when it
    was killed, a PID since reused by the attacker's process (returned, to be killed)."""
    runtime.mkdir(exist_ok=True)
    if how not in ("symlink", "pid reused by us") and os.geteuid() != 0:
        pytest.skip("only root can make a file or a process of another user")
    process = None
    if how == "left behind":
        process = subprocess.Popen(["sleep", "60"], user=65534)
    elif how == "pid reused by us":  # one of our own processes, not the listener's
        process = subprocess.Popen(["sleep", "60"])
    pid = process.pid if process else os.getppid()
    path = runtime / f"jpserver-{pid}.json"
    info = json.dumps({"url": listener.url, "token": "", "pid": pid, "root_dir": "/"})
    target = runtime.parent / "elsewhere.json" if how == "symlink" else path
    target.write_text(info)
    target.chmod(0o600)
    if how == "symlink":
        path.symlink_to(target)
    elif how == "another user's":
        os.chown(path, 65534, 65534)
    return process


@pytest.mark.parametrize("how", ["another user's", "symlink", "left behind", "pid reused by us"])
def test_a_planted_server_file_gets_no_token(tmp_path, listener, monkeypatch, how):
    runtime = tmp_path / "runtime"
    process = plant(runtime, listener, how)
    try:
        monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-secret")
        done = cli(
            "status",
            "--json",
            env=dict(ENV, JUPYTER_RUNTIME_DIR=str(runtime), JUPYTERHUB_API_TOKEN="hub-secret"),
        )
        assert json.loads(done.stdout)["source"]["kind"] == "nvml", done.stderr  # no server was found
        # a kernel whose connection file lies in that runtime dir, labelling for %gpu_mem
        monkeypatch.setattr(client, "connection_file", lambda: str(runtime / "kernel-1.json"))
        assert gpu_memory.server_labels(UUID1) == {}
        assert discover(runtime) == []
    finally:
        if process:
            process.kill()
            process.wait()
    assert listener.received == []


# -- what a server answers ---------------------------------------------------------------------


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 -- the name http.server calls
        self.server.answer(self)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def answering():
    """An HTTP server on loopback whose answer each test sets: ``answering(fn) -> url``."""
    servers = []

    def start(answer) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
        server.answer = answer
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_redirect_elsewhere_is_not_followed_with_the_token(answering, listener):
    def redirect(handler) -> None:
        handler.send_response(302)
        handler.send_header("Location", listener.url + "collect")
        handler.end_headers()

    url = answering(redirect)
    done = cli("status", "--url", url, "--token", "secret")
    assert done.returncode == 1
    assert one_line_error(done) == (
        f"jupyter gpu status: {url}api/gpu/devices redirects to {listener.url}collect "
        "(HTTP 302): not followed, the token would go along"
    )
    assert listener.received == []


def test_a_reply_over_the_bound_is_refused_in_one_line(answering):
    def flood(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        try:
            handler.wfile.write(b'{"pad": "' + b"x" * MAX_REPLY_BYTES + b'"}')
        except (BrokenPipeError, ConnectionResetError):  # the client hung up, as it should
            pass

    url = answering(flood)
    done = cli("status", "--url", url)
    assert done.returncode == 1
    assert (
        one_line_error(done) == f"jupyter gpu status: {url}api/gpu/devices sent more than 16.0 MiB: refused"
    )


def test_json_nested_past_the_recursion_limit_is_one_line(answering):
    def nested(handler) -> None:
        handler.send_response(200)
        handler.end_headers()
        handler.wfile.write(b"[" * 100_000 + b"]" * 100_000)

    url = answering(nested)
    done = cli("status", "--url", url)
    assert done.returncode == 1
    assert one_line_error(done) == f"jupyter gpu status: {url}api/gpu/devices did not answer with JSON"


def test_a_server_that_never_answers_costs_the_timeout():
    with socket.create_server(
        ("127.0.0.1", 0)
    ) as silent:  # never accepts: the kernel completes the handshake
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        started = time.monotonic()
        with pytest.raises(ServerError) as info:
            Server(url, "secret").get("api/gpu/devices", timeout=0.5)
        assert time.monotonic() - started < 5
    assert str(info.value) == f"cannot reach {url}: timed out"


# -- which server ------------------------------------------------------------------------------


LISTEN = (
    "import socket, sys, time; s = socket.create_server(('127.0.0.1', 0)); "
    "print(s.getsockname()[1], flush=True); time.sleep(60)"
)


def _listening() -> tuple[subprocess.Popen, int]:
    """A process of ours that listens, as a live server does (discovery checks its port)."""
    process = subprocess.Popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
    return process, int(process.stdout.readline())


def _server_file(runtime: Path, name: str, pid: int, root: Path, token: str = "t", port: int = 1) -> None:
    path = runtime / f"jpserver-{name}.json"
    path.write_text(
        json.dumps(
            {"url": f"http://127.0.0.1:{port}/{name}/", "token": token, "pid": pid, "root_dir": str(root)}
        )
    )
    path.chmod(0o600)


def test_the_server_that_owns_the_caller_comes_first(tmp_path, monkeypatch):
    """An ancestor of this process, then the deepest root_dir holding the working directory,
    then the rest; a stopped server's file is skipped."""
    course = tmp_path / "home" / "course"
    course.mkdir(parents=True)
    monkeypatch.chdir(course)
    others = [_listening() for _ in range(3)]
    stopped = subprocess.Popen(["true"])
    stopped.wait()
    with socket.create_server(("127.0.0.1", 0)) as mine:  # this process: an "ancestor" of itself
        try:
            for name, (process, port), root in zip(
                ("a-elsewhere", "b-home", "c-course"), others, (Path("/srv"), tmp_path / "home", course)
            ):
                _server_file(tmp_path, name, process.pid, root, port=port)
            _server_file(tmp_path, "d-stopped", stopped.pid, course)
            _server_file(tmp_path, "e-parent", os.getpid(), Path("/srv"), port=mine.getsockname()[1])
            _server_file(tmp_path, "f-not-listening", os.getppid(), course)  # port 1: not its port
            order = [s.url.rsplit("/", 2)[1] for s in discover(tmp_path)]
        finally:
            for process, _ in others:
                process.kill()
                process.wait()
    assert order == ["e-parent", "c-course", "b-home", "a-elsewhere"]


def test_the_hub_token_only_for_a_server_without_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-token")
    with socket.create_server(("127.0.0.1", 0)) as mine:
        port = mine.getsockname()[1]
        _server_file(tmp_path, "1-own", os.getpid(), tmp_path, token="own-token", port=port)
        _server_file(tmp_path, "2-hub", os.getpid(), tmp_path, token="", port=port)
        servers = discover(tmp_path)
    assert [s.token for s in servers] == ["own-token", "hub-token"]
    assert "own-token" not in repr(servers) and "hub-token" not in repr(servers)  # never in a log line
