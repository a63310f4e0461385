"""``jupyter gpu`` run as a user runs it: in a process of its own, importing jupyter_gpu from
this checkout; what it printed and how it exited; and the mark of a test of the verdicts it gives
on a machine without a GPU."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping

import pytest

from support.machine import HAS_GPU
from support.paths import ROOT


def with_checkout(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with this checkout first on PYTHONPATH."""
    return dict(environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")])))


# The environment the test session started with, this checkout first: what commands run with.
ENV = with_checkout(os.environ)

# Marks a test of the verdicts on a machine without a GPU: skipped where one answers.
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="checks the verdicts of a machine without a GPU")


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``jupyter gpu <args>``, finished."""
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu", *args],
        capture_output=True,
        text=True,
        env=env or ENV,
        timeout=timeout,
    )


def cli_together(*commands: tuple[str, ...], timeout: float = 120) -> list[subprocess.CompletedProcess]:
    """Several commands at once: each spends seconds importing torch."""
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "jupyter_gpu", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for args in commands
    ]
    outputs = [p.communicate(timeout=timeout) for p in started]
    return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(started, outputs)]


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """Bad input ends in one line on stderr: never a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


async def gpu_status(url: str, token: str, *extra: str, env: dict[str, str] | None = None) -> str:
    """What ``jupyter gpu status --url <url>`` prints, awaited from a server test's event loop
    (the test's own server keeps serving meanwhile); it must exit 0. It runs with ``env``, or
    else with the environment as the test has it now (pytest-jupyter's folders)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jupyter_gpu",
        "status",
        "--url",
        url,
        "--token",
        token,
        *extra,
        env=env or with_checkout(os.environ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()
