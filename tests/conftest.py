"""Shared fixtures and hooks: a real jupyter_server with the extension, demanding auth everywhere;
the gpu marker skipped without a GPU. What the tests share besides is in the package ``support``
(tests/support/); its modules that define fixtures are plugins, listed here."""

from __future__ import annotations

import os

import pytest
from support.machine import HAS_GPU
from support.paths import READINGS, ROOT

# Fixtures of the support modules, for every test module (only the root conftest may list them).
pytest_plugins = ["support.ddp_kernel", "support.ddp_checkpoints", "support.simulated_gpu"]


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
