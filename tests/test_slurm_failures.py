"""A ``%%ddp_launch --slurm`` cell whose job step Slurm ends for a reason of its own gets one
line saying why in Slurm's words: the job's time limit came, or a node died (named, with
Slurm's reason for it). While the cell runs, ``jupyter gpu status --slurm`` lists its job and
step. All against a real Slurm (tests/support/slurm_cluster.py).

The kernel runs in no job, as on a login node (``--alloc``'s case; a kernel inside the job would
end with it): each test asks Slurm for a job (``salloc --no-shell``, named as ``--alloc`` names
its jobs) and points the kernel at it through ``SLURM_JOB_ID`` and ``SLURM_JOB_NODELIST``.
Without Slurm or root these skip, except where JUPYTER_GPU_REQUIRE_SLURM=1 (CI): there they fail.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.paths import ROOT
from support.slurm_cluster import SlurmCluster, need_slurm
from support.slurm_kernel import SlurmKernel
from support.waiting import wait_until

from jupyter_gpu.ddp.slurm import JOB_NAME
from jupyter_gpu.ddp.slurm_queue import slurm_seconds

WAIT_CELL = """%%ddp_launch --slurm -n 1 --backend gloo --output all
import time
print('waiting', flush=True)
while True:
    time.sleep(0.1)
"""
SLURMD_TIMEOUT_S = 5  # how soon slurmctld gives up on a silent node (Slurm's default: 300 s)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    """A cluster of its own per test (up in ~1.5 s): a test leaves a node dead or a job ended."""
    need_slurm()
    with SlurmCluster(tmp_path, nodes=2, cpus_per_node=2) as cluster:
        yield cluster
    assert cluster.leftovers() == []


@pytest.fixture
def kernel(cluster: SlurmCluster) -> Iterator[SlurmKernel]:
    kernel = SlurmKernel(cluster, None, GLOO_SOCKET_IFNAME="eth0")
    yield kernel
    kernel.close()


def _use_new_job(cluster: SlurmCluster, kernel: SlurmKernel) -> str:
    """A two-node job named as ``--alloc`` names them, the kernel's from its next launch."""
    said = cluster.run(["salloc", "--no-shell", "-N2", f"--job-name={JOB_NAME}"]).stderr
    found = re.search(r"Granted job allocation (\d+)", said)
    assert found, said
    nodes = cluster.run(["squeue", "-h", "-j", found[1], "-o", "%N"]).stdout.strip()
    kernel.run(f"import os\nos.environ.update(SLURM_JOB_ID={found[1]!r}, SLURM_JOB_NODELIST={nodes!r})")
    return found[1]


def _start_waiting(kernel: SlurmKernel) -> str:
    msg_id = kernel.submit(WAIT_CELL)
    wait_until("both ranks waiting", lambda: _stdout(kernel, msg_id).count("waiting") == 2, timeout=120)
    return msg_id


def _stdout(kernel: SlurmKernel, msg_id: str) -> str:
    kernel.pump(0.1)
    return "".join(m["content"].get("text", "") for m in kernel.messages(msg_id) if m["msg_type"] == "stream")


def _error(kernel: SlurmKernel, msg_id: str, timeout: float) -> str:
    """The cell's error, which must be one line and no traceback of ours."""
    messages = kernel.wait(msg_id, timeout)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert len(errors) == 1, messages
    evalue = errors[0]["evalue"]
    assert "\n" not in evalue and "jupyter_gpu/" not in "".join(errors[0]["traceback"]), errors[0]
    return str(evalue)


def _status(cluster: SlurmCluster, *args: str) -> str:
    argv = [sys.executable, "-m", "jupyter_gpu", "status", "--slurm", *args]
    return cluster.run(argv, env={"PYTHONPATH": str(ROOT)}).stdout


def test_the_time_limit_is_named_and_status_slurm_lists_the_job_and_step(
    cluster: SlurmCluster, kernel: SlurmKernel
) -> None:
    job = _use_new_job(cluster, kernel)
    msg_id = _start_waiting(kernel)
    waiting = cluster.run(
        [
            "sbatch",
            "--parsable",
            f"--job-name={JOB_NAME}",
            "-N2",
            "--exclusive",
            "--time=5",
            "--wrap=sleep 600",
        ]
    )
    queued = waiting.stdout.strip()

    def listing() -> dict | None:  # once the scheduler has said why the second job waits
        listed = json.loads(_status(cluster, "--json"))
        return listed if any(j["id"] == queued and j["reason"] for j in listed["jobs"]) else None

    listed = wait_until("the second job's pending reason", listing, timeout=30)
    assert {
        j["id"]: (j["state"], j["nodes"], j["time_limit_seconds"], j["reason"]) for j in listed["jobs"]
    } == {
        job: ("RUNNING", "n[1-2]", None, None),
        queued: ("PENDING", "", 300, "Resources"),
    }
    assert [(s["id"], s["name"], s["nodes"]) for s in listed["steps"]] == [(f"{job}.0", JOB_NAME, "n[1-2]")]
    # Slurm's limits are whole minutes: the job ends once it has run the next whole minute
    # (at least 10 s from now, so the step is surely running when it comes)
    elapsed = slurm_seconds(cluster.run(["squeue", "-h", "-j", job, "-o", "%M"]).stdout)
    assert elapsed is not None
    cluster.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={math.ceil((elapsed + 10) / 60)}"])
    table = _status(cluster)
    assert re.search(rf"^\s*{job}\s+RUNNING\s+2 \(n\[1-2\]\)\s+\d+ s / 60 s\s*$", table, re.M), table
    assert re.search(rf"^\s*{queued}\s+PENDING\s+2\s+0 s / 5 min\s+Resources$", table, re.M), table
    assert re.search(rf"^\s*{job}\.0\s+RUNNING\s+n\[1-2\]\s+\d+ s / the job's\s*$", table, re.M), table
    cluster.run(["scancel", queued])
    error = _error(kernel, msg_id, timeout=150)
    assert re.fullmatch(
        rf"job {job} reached its time limit and Slurm cancelled the step: slurmstepd-n\d: error: "
        rf"\*\*\* STEP {job}\.0 ON n\d CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*",
        error,
    ), error
    assert _status(cluster).strip() == f"No Slurm jobs or job steps of yours named {JOB_NAME} in the queue."


def test_a_node_that_dies_mid_cell_is_named_with_slurms_reason(
    cluster: SlurmCluster, kernel: SlurmKernel
) -> None:
    with cluster.conf.open("a") as conf:  # slurmctld notices a silent node in seconds, not minutes
        conf.write(f"SlurmdTimeout={SLURMD_TIMEOUT_S}\n")
    cluster.run(["scontrol", "reconfigure"])
    _use_new_job(cluster, kernel)
    msg_id = _start_waiting(kernel)
    # n2 goes silent, as a node that lost power or its network does: no connection of its closes
    subprocess.run(["ip", "-n", cluster.node_netns["n2"], "link", "set", "eth0", "down"], check=True)
    error = _error(kernel, msg_id, timeout=120)
    assert error == "node n2 failed and Slurm ended the job step; Slurm's reason: Not responding"
    assert cluster.node_states()["n2"].startswith("down")


def test_a_node_whose_processes_all_die_is_named_at_once(cluster: SlurmCluster, kernel: SlurmKernel) -> None:
    """Its ranks' connections close, so the kernel knows before Slurm does (SlurmdTimeout)."""
    _use_new_job(cluster, kernel)
    msg_id = _start_waiting(kernel)
    cluster.kill_node("n2")
    error = _error(kernel, msg_id, timeout=60)
    assert error == (
        "rank 1 (on n2) stopped answering: the channel to the kernel closed "
        "(a rank's code closed it, or it was cut, or the node died)"
    )
