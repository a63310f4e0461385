"""Issue #21: the traps of a container, set for real: nvidia-smi left out by
NVIDIA_DRIVER_CAPABILITIES, a small tmpfs on /dev/shm against what the DataLoader's workers need,
a low ulimit -n, and a DataLoader statement the doctor cannot use; each with the cause, the fix
and the exit code the user sees."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys

import pytest
from support.doctor_cli import ENV, doctor, row
from support.doctor_facts import check, healthy

from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.facts import DataLoaderPlan


def test_gpus_without_nvidia_smi_in_a_container():
    facts = healthy()
    facts.nvidia_smi = None
    facts.env["NVIDIA_DRIVER_CAPABILITIES"] = "compute"
    got = check(evaluate(facts), "nvidia_smi")
    assert got.status is Status.WARN
    assert got.summary == (
        "GPUs are visible here, but nvidia-smi is not on PATH (NVIDIA_DRIVER_CAPABILITIES=compute leaves "
        "out utility)"
    )
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in got.fix


# -- DataLoader limits ----------------------------------------------------------------------------


def _unshare_mount() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-m", "true"]).returncode == 0


@pytest.mark.parametrize(
    ("args", "id_", "status", "cause"),
    [
        (
            ("--workers", "8", "--batch-mib", "16"),
            "dataloader_shm",
            "fail",
            "8 workers x 2 batches in flight x 16.0 MiB = 256 MiB of /dev/shm, but /dev/shm holds only 64.0 MiB",
        ),
        (("--workers", "1", "--batch-mib", "4"), "dataloader_shm", "ok", "= 8.00 MiB of /dev/shm: fits"),
        ((), "shm", "warn", "/dev/shm is only 64.0 MiB"),
    ],
)
def test_dev_shm_against_what_the_workers_need(args, id_, status, cause):
    """A 64 MiB tmpfs on /dev/shm (Docker's default) in a mount namespace of the doctor's own."""
    if not _unshare_mount():
        pytest.skip("cannot create a mount namespace here")
    mount = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    report, _ = doctor(
        "--no-server", *args, prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh")
    )
    got = row(report, id_)
    assert got["status"] == status and cause in got["summary"], got
    if status == "fail":
        assert "`docker run --shm-size=8g`" in got["fix"]


def test_a_low_open_files_limit_is_warned_with_the_sharing_strategy():
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    report, _ = doctor("--no-server", preexec_fn=low)
    got = row(report, "open_files")
    assert got["status"] == "warn"
    assert got["summary"].startswith("ulimit -n is 256: DataLoader workers pass every tensor")
    assert "sharing strategy file_descriptor" in got["summary"]
    assert "`torch.multiprocessing.set_sharing_strategy('file_system')`" in got["fix"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "4"), "--workers and --batch-mib go together"),
        (("--workers", "0", "--batch-mib", "8"), "--workers must be at least 1"),
        (("--workers", "4", "--batch-mib", "-1"), "--workers must be at least 1 and --batch-mib a positive"),
    ],
)
def test_a_bad_dataloader_statement_is_one_line(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu", "doctor", "--no-server", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"jupyter gpu doctor: {message}")
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_plan_is_what_dataloader_keeps_in_flight():
    assert DataLoaderPlan.stated(4, 8).shm_bytes == 4 * 2 * 8 * 2**20
    assert DataLoaderPlan.stated(None, None) is None
