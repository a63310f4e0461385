"""Issue #21: ``jupyter gpu preflight --nccl-env``, real ranks with the interface settings as
given: without a GPU it says why and tries gloo instead; on a GPU machine it runs NCCL and says
whether it works with these settings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.doctor_cli import ENV, MISSING_IF, no_gpu_only


def preflight_nccl_env(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu", "preflight", "--nccl-env", "--size-mib", "1", "--iters", "2"]
        + ["--timeout", "60"],
        capture_output=True,
        text=True,
        env={**ENV, **env},
        timeout=300,
    )


@no_gpu_only
@pytest.mark.parametrize(
    ("env", "code", "words"),
    [
        ({}, 3, "; no NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME to test with gloo instead"),
        (
            {"NCCL_SOCKET_IFNAME": MISSING_IF},
            1,
            f"; gloo through {MISSING_IF} fails too: rank ",
        ),
        (
            {"GLOO_SOCKET_IFNAME": "lo"},
            3,
            "; gloo all-reduced through lo, so the interface setting works for gloo",
        ),
    ],
)
def test_preflight_nccl_env_without_a_gpu_says_why_and_tries_gloo(env, code, words):
    """Real ranks (the one launcher, spawned) with the interface setting as given."""
    pytest.importorskip("torch")
    done = preflight_nccl_env(env)
    assert "Traceback" not in done.stderr, done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert done.returncode == code, done.stdout + done.stderr
    assert verdict.startswith("NCCL cannot run here: No GPU: ") and words in verdict
    if env.get("NCCL_SOCKET_IFNAME") == MISSING_IF:
        assert f"Unable to find address for: {MISSING_IF}" in verdict
        assert "[FAIL] NCCL_SOCKET_IFNAME:" in done.stdout  # the doctor's row, with its fix, above


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("env", "code", "words"),
    [
        ({}, 0, "NCCL works with these settings"),
        ({"NCCL_SOCKET_IFNAME": "lo"}, 0, "NCCL works with these settings"),
        ({"NCCL_SOCKET_IFNAME": MISSING_IF}, 1, "NCCL fails: "),
        ({"NCCL_P2P_DISABLE": "1"}, 0, "NCCL works with these settings"),
    ],
)
def test_preflight_nccl_env_runs_nccl_on_the_gpus(env, code, words):
    done = preflight_nccl_env(env)
    print(done.stdout)
    assert done.returncode == code, done.stdout + done.stderr
    assert words in done.stdout.strip().splitlines()[-1]
    assert "0.00 GB/s" not in done.stdout  # one rank moves nothing: no bandwidth is claimed
