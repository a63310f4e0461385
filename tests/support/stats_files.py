"""Allocator stats files as a kernel's agent writes them: a device record of the H200 fixtures,
and a document put in the test server's runtime dir for one of its kernels."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from jupyter_gpu.analysis.fragmentation import allocator_figures, summarize_snapshot
from jupyter_gpu.analysis.stats_file import VERSION, device_record, file_name
from support.fake_torch import fixture_segments, fixture_stats

NOW = 1_760_000_000.0  # the clock of the tests that read files written "now"


def fixture_device() -> dict:
    """GPU 0's record of the fragmented H200 allocator (tests/fixtures), read 2 s before ``NOW``."""
    figures = allocator_figures(fixture_stats(), summarize_snapshot(fixture_segments(), 0))
    return device_record(0, "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5", figures, NOW - 2)


def stats_doc(gpu_monitor: Any, kernel_id: str, devices: list[dict]) -> str:
    """What the agent of that kernel would write now: its PID, the current time."""
    pid = gpu_monitor.serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    return json.dumps(
        {
            "version": VERSION,
            "kernel_id": kernel_id,
            "pid": pid,
            "time": time.time(),
            "cuda_in_use": True,
            "devices": devices,
        }
    )


def publish(gpu_monitor: Any, kernel_id: str, text: str, path: Path | None = None) -> Path:
    """Put ``text`` where the server reads that kernel's stats (or at ``path``), mode 0600."""
    path = path or Path(gpu_monitor.serverapp.kernel_manager.connection_dir) / file_name(kernel_id)
    path.write_text(text)
    path.chmod(0o600)
    return path
