"""``jupyter gpu doctor`` and ``jupyter gpu warmup`` as users run them: subprocesses, exit codes
and JSON; the doctor's failing report on a machine without a GPU, and both passing on every GPU
of a GPU machine."""

from __future__ import annotations

import json

import pytest
from support.cli import cli, cli_together, no_gpu_only
from support.machine import nvidia_smi

# -- a machine without a GPU ----------------------------------------------------------------------


@no_gpu_only
def test_doctor_fails_with_exit_1_and_the_same_report_as_json():
    done = cli("doctor", "--json", "--no-server")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["cuda_ready"] is False and report["status"] == "fail"
    assert report["verdict"].startswith("No GPU: ")
    assert any(c["status"] == "fail" and c["fix"] for c in report["checks"])


# -- on a GPU machine -----------------------------------------------------------------------------


@pytest.mark.gpu
def test_doctor_and_warmup_pass_on_every_gpu():
    doctor, warmup, as_json = cli_together(
        ("doctor", "--json", "--no-server"), ("warmup",), ("warmup", "--json"), timeout=300
    )
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and report["cuda_ready"], report["verdict"]
    assert warmup.returncode == 0, warmup.stdout + warmup.stderr
    count = len(nvidia_smi("index"))
    assert all(f"cuda:{i} " in warmup.stdout for i in range(count)) and "FAILED" not in warmup.stdout
    warm = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and warm["ok"] and len(warm["sections"]) == count
    assert all(
        step["error"] is None and step["ms"] > 0 for section in warm["sections"] for step in section["steps"]
    )
