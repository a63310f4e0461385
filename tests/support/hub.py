"""A real JupyterHub for the instructor-view tests: the Hub, configurable-http-proxy from npm,
DummyAuthenticator, SimpleLocalProcessSpawner, and student servers running jupyter_server with
jupyter_gpu on the simulated backend. The service ``jupyter-gpu`` is registered with the very
roles the docs give (``hub_config`` below is the block of docs/guide/jupyterhub.md plus test plumbing).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, WebSocketClosedError, websocket_connect

from support.paths import READINGS, ROOT

T = TypeVar("T")
PASSWORD = "workshop"
INSTRUCTOR = "teacher"


def need_proxy() -> None:
    """Skip without configurable-http-proxy, except in CI (.ci/run installs it and says so)."""
    if shutil.which("configurable-http-proxy") is None:
        if os.environ.get("JUPYTER_GPU_REQUIRE_HUB"):
            pytest.fail("configurable-http-proxy is not installed (npm install -g configurable-http-proxy)")
        pytest.skip("needs configurable-http-proxy (npm install -g configurable-http-proxy)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hub_config(
    proxy: str, service_port: int, admin_token: str, home: Path, service_args: tuple[str, ...] = ()
) -> str:
    """jupyterhub_config.py: the docs' service and roles, then what only the tests need."""
    singleuser_args = [
        *(["--allow-root"] if os.geteuid() == 0 else []),  # the Hub refuses root servers otherwise
        "--ServerApp.jpserver_extensions={'jupyter_gpu': True}",
        "--GPUMonitor.backend=simulated",
        f"--GPUMonitor.simulated_readings={READINGS}",
        "--GPUMonitor.interval=0.2",
    ]
    return f"""
import sys
c = get_config()  # noqa

# --- as in docs/guide/jupyterhub.md ---
c.JupyterHub.services = [
    {{
        "name": "jupyter-gpu",
        "url": "http://127.0.0.1:{service_port}",
        "command": [sys.executable, "-m", "jupyter_gpu.hub", "--proxy-url", "{proxy}", *{list(service_args)!r}],
        "oauth_no_confirm": True,
    }},
    {{"name": "test-admin", "api_token": {admin_token!r}}},
]
c.JupyterHub.load_groups = {{"instructors": {{"users": [{INSTRUCTOR!r}]}}}}
c.JupyterHub.load_roles = [
    {{
        "name": "jupyter-gpu-service",
        "services": ["jupyter-gpu"],
        "scopes": ["list:users", "read:users:name", "read:servers", "access:servers", "admin:servers", "tokens"],
    }},
    {{
        "name": "jupyter-gpu-instructors",
        "groups": ["instructors"],
        "scopes": ["access:services!service=jupyter-gpu"],
    }},
    {{"name": "admin", "services": ["test-admin"]}},
]

# --- test plumbing ---
c.JupyterHub.bind_url = "{proxy}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{_free_port()}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{_free_port()}"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allow_all = True
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(home / "{username}")!r}
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = {singleuser_args!r}
c.Spawner.start_timeout = 60
c.Spawner.http_timeout = 60
"""


class RealHub:
    """``jupyterhub`` in a subprocess, in its own directory; ``admin`` calls its API as admin."""

    def __init__(self, tmp: Path, service_args: tuple[str, ...] = ()) -> None:
        need_proxy()
        self.tmp = tmp
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.admin_token = secrets.token_hex(16)
        (tmp / "home").mkdir()
        (tmp / "jupyterhub_config.py").write_text(
            hub_config(self.url, _free_port(), self.admin_token, tmp / "home", service_args)
        )
        self.log_path = tmp / "jupyterhub.log"
        self._log = open(self.log_path, "ab")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", "jupyterhub_config.py"],
            cwd=tmp,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.wait_for("the Hub and its jupyter-gpu service", self._service_up, timeout=60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, what: str, check: Callable[[], T], timeout: float = 20.0) -> T:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"jupyterhub exited with {self.process.returncode}:\n{self.log()[-4000:]}")
            try:
                value = check()
            except requests.RequestException:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def _service_up(self) -> bool:
        # the service's page answers (with a redirect to the Hub's login) once it listens
        reply = requests.get(f"{self.url}/services/jupyter-gpu/", allow_redirects=False, timeout=5)
        return reply.status_code == 302 and "/hub/api/oauth2/authorize" in reply.headers.get("location", "")

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A request with the admin token, to the Hub's API (``hub/api/...``) or a user server."""
        return requests.request(
            method,
            f"{self.url}/{path}",
            headers={"Authorization": f"token {self.admin_token}"},
            timeout=30,
            **kwargs,
        )

    def user_model(self, name: str) -> dict:
        reply = self.admin("GET", f"hub/api/users/{name}")
        reply.raise_for_status()
        return reply.json()

    def start_servers(self, *names: str) -> None:
        """Create the users if need be and start their default servers, all at once: the Hub
        spawns concurrently, but each POST waits for its spawn (up to the Hub's slow_spawn_timeout),
        so they go out from threads. Returns once every server is ready."""

        def start(name: str) -> None:
            if self.admin("GET", f"hub/api/users/{name}").status_code == 404:
                assert self.admin("POST", f"hub/api/users/{name}").status_code == 201
            reply = self.admin("POST", f"hub/api/users/{name}/server")
            assert reply.status_code in (201, 202), reply.text

        with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
            for done in [pool.submit(start, name) for name in names]:
                done.result()  # an assertion in a thread fails the test here
        for name in names:
            self.wait_for(
                f"{name}'s server",
                lambda name=name: self.user_model(name)["servers"].get("", {}).get("ready"),
                60,
            )

    def server_pid(self, name: str) -> int:
        return self.user_model(name)["servers"][""]["state"]["pid"]

    def start_kernel(self, user: str, notebook: str) -> str:
        """A session (kernel + notebook path) in the user's server; returns the kernel id."""
        reply = self.admin(
            "POST",
            f"user/{user}/api/sessions",
            json={"path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}},
        )
        assert reply.status_code == 201, reply.text
        return reply.json()["kernel"]["id"]

    def kernel_ids(self, user: str) -> set[str]:
        reply = self.admin("GET", f"user/{user}/api/kernels")
        reply.raise_for_status()
        return {k["id"] for k in reply.json()}

    def events(self, user: str) -> EventStream:
        """The user's server's event stream, subscribed to as her JupyterLab tab subscribes."""
        url = self.url.replace("http://", "ws://", 1) + f"/user/{user}/api/events/subscribe"
        return EventStream(url, self.admin_token)

    def login(self, name: str) -> requests.Session:
        """A browser-like session logged in to the Hub as ``name`` (DummyAuthenticator)."""
        session = requests.Session()
        page = session.get(f"{self.url}/hub/login", timeout=10)
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
        form = {"username": name, "password": PASSWORD, **({"_xsrf": xsrf.group(1)} if xsrf else {})}
        reply = session.post(f"{self.url}/hub/login", data=form, timeout=30)
        assert reply.ok, reply.text[-2000:]
        return session

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._log.close()


class EventStream:
    """A server's events (``api/events/subscribe``), read on a thread of its own into ``events``,
    each with ``received``: when it came (``time.monotonic()``). Ends when the server goes."""

    def __init__(self, url: str, token: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        request = HTTPRequest(url, headers={"Authorization": f"token {token}"}, connect_timeout=30)
        self._socket = asyncio.run_coroutine_threadsafe(self._connect(request), self._loop).result(60)
        self._reading = asyncio.run_coroutine_threadsafe(self._read(), self._loop)

    @staticmethod
    async def _connect(request: HTTPRequest) -> WebSocketClientConnection:
        return await websocket_connect(request)

    async def _read(self) -> None:
        while (message := await self._socket.read_message()) is not None:
            self.events.append({**json.loads(message), "received": time.monotonic()})

    def of(self, schema_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["schema_id"] == schema_id]

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._socket.close)
        try:
            self._reading.result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


class TerminalInUse(EventStream):
    """One of the user's JupyterLab terminals with someone working in it: a command typed every
    second, its output read back (the terminal's activity), until ``close``."""

    def __init__(self, hub: RealHub, user: str) -> None:
        name = hub.admin("POST", f"user/{user}/api/terminals").json()["name"]
        ws = hub.url.replace("http://", "ws://", 1)
        super().__init__(f"{ws}/user/{user}/terminals/websocket/{name}", hub.admin_token)

    async def _read(self) -> None:
        while True:
            try:
                await self._socket.write_message(json.dumps(["stdin", "echo working\r"]))
            except WebSocketClosedError:
                return
            if await self._socket.read_message() is None:
                return
            await asyncio.sleep(1.0)  # a person typing, not a wait for anything


def page_xsrf(html: str) -> str:
    match = re.search(r'<meta name="xsrf" content="([^"]+)"', html)
    assert match, html[:2000]
    return match.group(1)


def service_json(session: requests.Session, hub: RealHub, path: str = "api/kernels") -> dict:
    reply = session.get(f"{hub.url}/services/jupyter-gpu/{path}", timeout=30)
    assert reply.status_code == 200, reply.text[-2000:]
    return json.loads(reply.text)
