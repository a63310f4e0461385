"""Shared fixtures: a real jupyter_server with the extension, demanding auth everywhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
READINGS = FIXTURES / "nvml_readings_2gpu.json"


def modules_after(code: str, watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has imported after running ``code`` (from the
    repository root, so that it sees this checkout)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


HAS_GPU = _has_gpu()


def wait_until(what: str, check: Callable[[], T], timeout: float = 10.0) -> T:
    """Poll ``check`` until it returns something true, and return that; fail naming ``what``
    once ``timeout`` seconds have passed (a wait in a test never ends quietly)."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}", pytrace=False)
        time.sleep(0.01)
    return value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (nvidia-smi -L failed or is absent)")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


@pytest.fixture
def gpu_monitor_config() -> dict:
    """Override in a test module to change the extension's configuration."""
    return {
        "backend": "simulated",
        "simulated_readings": str(READINGS),
        "interval": 0.05,
        "slow_interval": 0.5,
        "retry_interval": 0.1,
    }


@pytest.fixture
def jp_server_config(gpu_monitor_config: dict) -> dict:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_gpu": True},
            "allow_unauthenticated_access": False,
            "allow_root": True,
        },
        "GPUMonitor": gpu_monitor_config,
    }


@pytest.fixture
def kernel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels started by the in-process server inherit this: they import jupyter_gpu from this
    checkout (and whatever else PYTHONPATH already held)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def gpu_monitor(jp_serverapp):
    """The running extension app, for tests that inject faults into its simulated NVML."""
    return jp_serverapp.extension_manager.extension_points["jupyter_gpu"].app
