"""Browser tests: a real `jupyter lab` in a subprocess (LabServer), driven by Debian's chromium
through Playwright (python), which cannot download browsers here and is pointed at the system one.

The fixtures that start them are in tests/browser/conftest.py. Screenshots are saved under
test-artifacts/screenshots/; the folder is printed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking import BlockingKernelClient

from support.paths import READINGS, TESTS
from support.paths import ROOT as REPO

# The test-only server extension that lets a test reach the server's simulated NVML
# (tests/support/browser_extension.py), loaded by module name: tests/ is on the server's path.
EXTENSION = "support.browser_extension"
LABEXT_BUILD = REPO / "jupyter_gpu" / "labextension"
LABEXT_SOURCES = [REPO / "labextension" / d for d in ("src", "style", "schema")]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _labextension_dir() -> Path | None:
    """The freshly built extension from this checkout, or None to use an installed copy."""
    marker = LABEXT_BUILD / "static" / "style.js"
    if marker.exists():
        built = (LABEXT_BUILD / "package.json").stat().st_mtime
        newer = [
            p
            for d in LABEXT_SOURCES
            for p in d.rglob("*")
            if p.is_file() and "__tests__" not in p.parts and p.stat().st_mtime > built + 1
        ]
        if newer:
            pytest.fail(
                f"the built labextension is older than {newer[0].relative_to(REPO)}: "
                "rebuild it with `cd labextension && jlpm build` (or `pip install -e .`)",
                pytrace=False,
            )
        return LABEXT_BUILD
    from jupyter_core.paths import jupyter_path

    if any((Path(p) / "jupyter-gpu").is_dir() for p in jupyter_path("labextensions")):
        return None
    pytest.fail(
        "the jupyter-gpu labextension is neither built in this checkout nor installed: "
        "run `pip install -e .` (or `cd labextension && jlpm install && jlpm build`)",
        pytrace=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A `jupyter lab` subprocess with its own config, data, runtime and notebook dirs; with
    ``app="notebook"``, Notebook 7's `jupyter notebook` instead (the same extension system), and
    with ``app="jupyter_server"`` the server alone (no front end: the GPU machine has none)."""

    def __init__(
        self,
        tmp: Path,
        *,
        base_url: str = "/",
        gpu: dict | None = None,
        app: str = "jupyterlab",
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.tmp = tmp
        self.app = app
        self.prefix = prefix  # what the server is started under (e.g. entering a cgroup)
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.root = tmp / "notebooks"
        self.log_path = tmp / "jupyter-lab.log"
        for d in ("config/labconfig", "data/labextensions", "runtime", "settings", "workspaces", "notebooks"):
            (tmp / d).mkdir(parents=True, exist_ok=True)
        extension = _labextension_dir() if app != "jupyter_server" else None  # no front end to serve it
        if extension is not None:
            (tmp / "data" / "labextensions" / "jupyter-gpu").symlink_to(extension)
        config = {
            "ServerApp": {
                "jpserver_extensions": {"jupyter_gpu": True, EXTENSION: True},
                "allow_unauthenticated_access": False,
            },
            "GPUMonitor": {
                "backend": "simulated",
                "simulated_readings": str(READINGS),
                "interval": 0.5,
                "slow_interval": 1.0,
                **(gpu or {}),
            },
        }
        (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
        # News pop-ups would cover the status bar; nothing else of JupyterLab is changed.
        (tmp / "config" / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
        )
        self.start()

    def start(self) -> None:
        """Start (or start again, on the same port and with the same token and dirs)."""
        tmp = self.tmp
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(tmp / "config"),
            JUPYTER_DATA_DIR=str(tmp / "data"),
            JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
            PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS), env.get("PYTHONPATH", "")]),
        )
        cmd = [
            *self.prefix,
            sys.executable,
            "-m",
            self.app,
            "--allow-root",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            f"--ServerApp.base_url={self.base_url}",
        ]
        if self.app != "jupyter_server":  # a front end: JupyterLab, or Notebook 7
            app_class = "LabApp" if self.app == "jupyterlab" else "JupyterNotebookApp"
            cmd += [
                f"--{app_class}.user_settings_dir={tmp / 'settings'}",
                f"--{app_class}.workspaces_dir={tmp / 'workspaces'}",
                f"--{app_class}.expose_app_in_browser=True",
            ]
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            cmd, env=env, cwd=tmp, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_url}"

    def lab_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={self.token}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            tail = "\n".join(self.log().splitlines()[-40:])
            raise AssertionError(
                f"{method} {path}: {error.code} {detail}\n--- server log ---\n{tail}"
            ) from None
        return json.loads(text) if text else {}

    def _wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n{self.log()}")
            try:
                self.api("GET", "api/status")
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {timeout} s:\n{self.log()}")

    def start_notebook_kernel(self, path: str) -> str:
        """Create an empty notebook at `path` and start a kernel session for it."""
        notebook = {
            "cells": [],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(notebook))
        session = self.api(
            "POST",
            "api/sessions",
            {"path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}},
        )
        return session["kernel"]["id"]

    def kernel_client(self, kernel_id: str) -> BlockingKernelClient:
        """A client of one of its kernels, ready, through the kernel's connection file."""
        client = BlockingKernelClient()
        client.load_connection_file(str(self.tmp / "runtime" / f"kernel-{kernel_id}.json"))
        client.start_channels(hb=False)
        # wait_for_ready would also ask the heartbeat, which a kernel busy starting (another
        # kernel's CUDA context being made beside it) may not answer in its first second
        client.kernel_info()
        client.get_shell_msg(timeout=60)
        return client

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


def open_lab(page: Any, server: LabServer, path: str = "lab") -> None:
    page.goto(server.lab_url(path))
    page.wait_for_selector("#jp-main-statusbar", state="attached", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.restored !== undefined")
    # the layout (open sidebar panels) is restored from the workspace before tests click on it
    page.evaluate("() => window.jupyterapp.restored")


def run_page_until(
    page: Any, what: str, done: Callable[[], bool], timeout_s: float = 30, event: str = "request"
) -> None:
    """Let the page run until ``done()`` holds, looking again at each ``event`` it fires (what the
    test records comes from its requests); fail naming ``what`` after ``timeout_s``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    deadline = time.monotonic() + timeout_s
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}", pytrace=False)
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_event(event, timeout=left * 1000)


def open_lab_listening(page: Any, server: LabServer) -> None:
    """``open_lab``, then wait until JupyterLab subscribes to the server's event stream (the
    culler's and the kernel deaths' notifications come that way)."""
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    open_lab(page, server)
    run_page_until(
        page,
        "JupyterLab's event stream",
        lambda: any("api/events/subscribe" in u for u in sockets),
        event="websocket",
    )


def run_from_palette(page: Any, label: str, shows: str | None = None, timeout_s: float = 60) -> None:
    """Run the command labelled ``label`` as a user does: the command palette from the View menu
    (JupyterLab and Notebook 7 both have it), type, then Enter on the highlighted match, until
    the element ``shows`` (a selector) is visible, if given. Again from the menu until it works:
    on a loaded machine a click can go unheard, the palette can close again (JupyterLab opens
    its launcher after restoring, which takes the focus and may cover what the command opened),
    and its items redraw whenever any command changes. Fails after ``timeout_s``."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    palette = page.locator("#command-palette input")
    match = page.locator(f'#command-palette .lm-CommandPalette-item.lm-mod-active:has-text("{label}")')
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if not palette.is_visible():
                page.locator('.lm-MenuBar-itemLabel:text-is("View")').click(timeout=5_000)
                page.locator('.lm-Menu-itemLabel:text-is("Activate Command Palette")').click(timeout=5_000)
                palette.wait_for(timeout=5_000)
            palette.fill(label, timeout=5_000)
            match.wait_for(timeout=5_000)
            palette.press("Enter", timeout=5_000)
            if shows is not None:
                page.locator(shows).wait_for(state="visible", timeout=5_000)
            return
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                pytest.fail(f"the command palette did not run {label!r} in {timeout_s:g} s", pytrace=False)
            page.keyboard.press("Escape")  # a menu left open would take the next click


def open_gpu_panel(page: Any) -> None:
    """Click the GPU tab in the left sidebar unless the panel is already showing."""
    if not page.locator("#jupyter-gpu-panel").is_visible():
        page.locator('.jp-SideBar li[data-id="jupyter-gpu-panel"]').click()
    page.wait_for_selector("#jupyter-gpu-panel", state="visible")


@contextlib.contextmanager
def allocator_stats_published(
    server: LabServer, kernel_id: str, pid: int, devices: list[dict]
) -> Iterator[Path]:
    """Stand in for the kernel agent (which needs CUDA): keep the kernel's allocator stats file
    fresh in the server's runtime dir, written the agent's way (temp file, rename, mode 0600)."""
    path = server.tmp / "runtime" / f"jupyter_gpu-kernel-{kernel_id}.json"
    stop = threading.Event()

    def publish() -> None:
        while True:
            doc = {
                "version": 1,
                "kernel_id": kernel_id,
                "pid": pid,
                "time": time.time(),
                "cuda_in_use": True,
                "devices": devices,
            }
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
            if stop.wait(1.0):
                return

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        path.unlink(missing_ok=True)


def missing(why: str) -> None:
    """Skip, except where JUPYTER_GPU_REQUIRE_BROWSER=1 (CI): there a missing browser fails."""
    if os.environ.get("JUPYTER_GPU_REQUIRE_BROWSER") == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


# -- replies a real H200 gave, recorded by the gpu tests ---------------------------------------


def recorded_in(folder: Path, name: str) -> dict:
    """One recorded reply of a gpu test's run (``name``.json in ``folder``)."""
    return json.loads((folder / f"{name}.json").read_text())


def answer_with(body: str) -> Callable[[Any, Any], None]:
    """A Playwright route handler that answers every request it catches with ``body`` (JSON)."""

    def handler(route: Any, request: Any) -> None:
        route.fulfill(status=200, content_type="application/json", body=body)

    return handler
