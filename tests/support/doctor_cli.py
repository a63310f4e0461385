"""``jupyter gpu doctor --json`` run as a user runs it, for the tests of the environment traps
(issue #21): in an environment with this checkout first on PYTHONPATH and none of the settings
those tests set (NCCL_SOCKET_IFNAME, ...) inherited from this machine; its report and exit code,
and one row of the report. An interface name no machine has, and the mark of a test whose
verdict holds only where the missing driver already fails the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.cli import with_checkout
from support.machine import HAS_GPU

ENV = with_checkout(os.environ)
for _name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR", "PYTORCH_CUDA_ALLOC_CONF"):
    ENV.pop(_name, None)
MISSING_IF = "jgpu-missing0"  # an interface no machine has
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="this machine's report already fails for its missing driver")


def doctor(*args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), **kw):
    """`jupyter gpu doctor --json` as a user runs it: (report, exit code)."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "jupyter_gpu", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=120,
        **kw,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout), done.returncode


def row(report: dict, id_: str) -> dict:
    found = [c for c in report["checks"] if c["id"] == id_]
    assert found, f"no {id_} check in {[c['id'] for c in report['checks']]}"
    return found[0]
