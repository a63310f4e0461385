"""``--slurm --alloc`` from a login node, against a real Slurm (tests/support/slurm_cluster.py):
a kernel in the lab namespace but in no job asks Slurm for an allocation, runs cells across its
nodes, shows where a waiting request stands, and never leaves a job behind: not after
``%ddp_stop``, an interrupt while waiting, a shutdown, or a SIGKILL of the kernel.

Without Slurm or root these skip, except where JUPYTER_GPU_REQUIRE_SLURM=1 (CI): there they fail.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator

import pytest
from support.slurm_cluster import SlurmCluster
from support.slurm_fixtures import two_nodes
from support.slurm_kernel import SlurmKernel
from support.waiting import wait_until

from jupyter_gpu.ddp.slurm_alloc import gpus_in

ALLOC = '--alloc "--nodes=2 --ntasks-per-node=2"'
HOSTS = """%%ddp_launch --slurm -n 2 --backend gloo --output all {alloc}
import os, socket
total = torch.tensor([float(RANK)])
dist.all_reduce(total)
print(f"rank {{RANK}} on {{socket.gethostname()}} in job {{os.environ['SLURM_JOB_ID']}}: sum {{int(total)}}")
"""
ONE_RANK = '%%ddp_launch --slurm -n 1 --backend gloo --alloc "--nodes=1"\nprint("ran")\n'


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    yield from two_nodes(tmp_path_factory)


@pytest.fixture
def login(cluster: SlurmCluster) -> Iterator[SlurmKernel]:
    """A kernel on the "login node": Slurm's commands work, and it runs in no job."""
    kernel = SlurmKernel(cluster, None, GLOO_SOCKET_IFNAME="eth0")
    assert kernel.job is None
    yield kernel
    kernel.close()


def _jobs(cluster: SlurmCluster) -> dict[str, str]:
    """Job id -> name of every job squeue shows."""
    out = cluster.run(["squeue", "-h", "-o", "%i %j"]).stdout
    return dict(line.split() for line in out.splitlines())


def _none_left(cluster: SlurmCluster, what: str) -> None:
    wait_until(f"no job in squeue {what}", lambda: not _jobs(cluster), timeout=60)


def _shown(kernel: SlurmKernel, msg_id: str) -> list[str]:
    """The progress line as the notebook shows it, each version of it in order."""
    return [
        m["content"]["data"]["text/plain"]
        for m in kernel.messages(msg_id)
        if m["msg_type"] in ("display_data", "update_display_data")
    ]


def test_alloc_runs_cells_across_two_nodes_until_ddp_stop_releases_it(
    login: SlurmKernel, cluster: SlurmCluster
) -> None:
    cell = login.run(HOSTS.format(alloc=ALLOC), timeout=240)
    assert cell.error is None and "UsageError" not in cell.stderr, cell.traceback + cell.stderr
    (job,) = _jobs(cluster)
    assert _jobs(cluster) == {job: "jupyter_gpu"}
    assert re.fullmatch(rf"Slurm job {job} granted after \d+ s: n1,n2", _shown(login, cell.msg_id)[-1])
    lines = sorted(line for line in cell.stdout.splitlines() if "sum" in line)
    assert lines == [
        f"[n1 rank 0] rank 0 on n1 in job {job}: sum 6",
        f"[n1 rank 1] rank 1 on n1 in job {job}: sum 6",
        f"[n2 rank 2] rank 2 on n2 in job {job}: sum 6",
        f"[n2 rank 3] rank 3 on n2 in job {job}: sum 6",
    ]
    assert login.run("%ddp_status").stdout.splitlines()[-1] == (
        f"Slurm job {job} held by this kernel (--alloc '--nodes=2 --ntasks-per-node=2'): 2 nodes n1,n2"
    )
    # later launches, with the same --alloc (the cell run again) or none, run in the same job
    for alloc in (ALLOC, ""):
        again = login.run(HOSTS.format(alloc=alloc), timeout=240)
        assert again.error is None and "UsageError" not in again.stderr, again.traceback + again.stderr
        assert again.stdout.count(f"in job {job}: sum 6") == 4
    other = login.run('%%ddp_launch --slurm -n 1 --alloc "--nodes=1"\nprint("never")\n')
    assert other.stderr.strip() == (
        f"UsageError: --alloc: this kernel holds Slurm job {job} already "
        "(--alloc '--nodes=2 --ntasks-per-node=2'); %ddp_stop gives it back first"
    )
    assert login.run("%ddp_stop").stdout.strip() == f"Slurm job {job} released"
    _none_left(cluster, "after %ddp_stop")
    after = login.run("%%ddp_launch --slurm -n 1\nprint('never')\n")
    assert after.stderr.startswith(
        "UsageError: --slurm runs inside a Slurm allocation and this kernel is in none"
    )


def test_an_allocation_ended_under_the_kernel_is_said_in_words(
    login: SlurmKernel, cluster: SlurmCluster
) -> None:
    cell = login.run(ONE_RANK, timeout=240)
    assert cell.error is None and "UsageError" not in cell.stderr, cell.traceback + cell.stderr
    (job,) = _jobs(cluster)
    cluster.run(["scancel", job])
    cell = login.run("%%ddp_launch --slurm -n 1\nprint('never')\n")
    assert cell.stderr.strip() == (
        f"UsageError: Slurm job {job}, this kernel's allocation, has ended: it was cancelled"
    )
    assert login.run("%ddp_stop").stdout.strip() == "No DDP session to stop"


def test_an_allocation_past_its_time_limit_is_said_in_slurm_s_words(
    login: SlurmKernel, cluster: SlurmCluster
) -> None:
    cell = login.run(ONE_RANK.replace("--nodes=1", "--nodes=1 --time=1"), timeout=240)
    assert cell.error is None and "UsageError" not in cell.stderr, cell.traceback + cell.stderr
    (job,) = _jobs(cluster)
    # a minute, then slurmctld's next check (every 30 s): only Slurm's clock ends it
    wait_until("the job's time limit", lambda: "JobState=TIMEOUT" in _job(cluster, job), timeout=180)
    cell = login.run("%%ddp_launch --slurm -n 1\nprint('never')\n")
    assert cell.stderr.strip() == (
        f"UsageError: Slurm job {job}, this kernel's allocation, has ended: its time limit was "
        "reached (Slurm's reason: TimeLimit)"
    )
    assert _jobs(cluster) == {}


def _job(cluster: SlurmCluster, job: str) -> str:
    return cluster.run(["scontrol", "show", "job", "-o", job], check=False).stdout


def test_bad_alloc_options_are_one_line_in_salloc_s_own_words(
    login: SlurmKernel, cluster: SlurmCluster
) -> None:
    said = {
        '%%ddp_launch -n 1 --alloc "--nodes=1"': "--alloc asks Slurm for the nodes that --slurm runs on: add --slurm",
        '%%ddp_launch --slurm -n 1 --alloc "--bogus"': (
            "salloc refused the allocation: salloc: unrecognized option '--bogus'"
        ),
        '%%ddp_launch --slurm -n 1 --alloc "-Jmine -N1"': "--alloc: leave out -J: the job is named jupyter_gpu",
        # salloc's getopt takes run-together short options and any unique prefix of a long one
        '%%ddp_launch --slurm -n 1 --alloc "-vQ -N1"': "--alloc: leave out -Q: the job id is read from salloc's messages",
        '%%ddp_launch --slurm -n 1 --alloc "--quie -N1"': (
            "--alloc: leave out --quie (--quiet): the job id is read from salloc's messages"
        ),
        '%%ddp_launch --slurm -n 1 --alloc "--nodes=\'1"': '--alloc "--nodes=\'1": No closing quotation',
    }
    for line, error in said.items():
        cell = login.run(f"{line}\nprint('never')\n")
        assert cell.stderr.strip() == f"UsageError: {error}", line
    assert _jobs(cluster) == {}


def test_a_waiting_request_shows_its_place_and_an_interrupt_cancels_it(
    login: SlurmKernel, cluster: SlurmCluster
) -> None:
    # another user's job holds both nodes for 10 minutes: ours waits for Resources
    cluster.run(["salloc", "--no-shell", "-N2", "--exclusive", "--time=10", "-J", "other"])
    (other,) = _jobs(cluster)
    msg_id = login.submit(ONE_RANK)
    # backfill plans it to start when the other job's time is up (the cluster plans every second)
    line = wait_until(
        "the queue line with a planned start",
        lambda: login.pump(0.1) or [s for s in _shown(login, msg_id) if "expected to start" in s],
        timeout=60,
    )[-1]
    (job,) = set(_jobs(cluster)) - {other}
    assert re.fullmatch(
        rf"Slurm job {job} pending \(Resources\), 1 of 1 waiting in test, expected to start at "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(in (9|10) min\), waited \d+ s",
        line,
    ), line
    assert _jobs(cluster) == {other: "other", job: "jupyter_gpu"}
    login.km.interrupt_kernel()
    cell = login.wait(msg_id)
    error = [m["content"] for m in cell if m["msg_type"] == "error"]
    assert error[0]["evalue"] == f"interrupted; Slurm job {job} cancelled while it waited"
    wait_until("only the other job in squeue", lambda: _jobs(cluster) == {other: "other"}, timeout=60)
    cluster.run(["scancel", other])
    _none_left(cluster, "after the other job")


def test_a_kernel_killed_while_holding_an_allocation_leaves_no_job(cluster: SlurmCluster) -> None:
    kernel = SlurmKernel(cluster, None, GLOO_SOCKET_IFNAME="eth0")
    try:
        cell = kernel.run(ONE_RANK, timeout=240)
        assert cell.error is None and "ran" in cell.stdout, cell.traceback + cell.stderr
        assert list(_jobs(cluster).values()) == ["jupyter_gpu"]
        os.kill(kernel.pid, signal.SIGKILL)
        _none_left(cluster, "after the kernel's SIGKILL")
    finally:
        kernel.close()


def test_a_kernel_shut_down_while_holding_an_allocation_leaves_no_job(cluster: SlurmCluster) -> None:
    kernel = SlurmKernel(cluster, None, GLOO_SOCKET_IFNAME="eth0")
    cell = kernel.run(ONE_RANK, timeout=240)
    assert cell.error is None and "ran" in cell.stdout, cell.traceback + cell.stderr
    assert list(_jobs(cluster).values()) == ["jupyter_gpu"]
    kernel.close()
    _none_left(cluster, "after the kernel's shutdown")


@pytest.mark.parametrize(
    ("tres_per_node", "gpus"),
    [
        ("gres:gpu:4", 4),  # Slurm 22.05, --gpus-per-node=4
        ("gres/gpu:4", 4),  # 23.02 on
        ("gres/gpu:a100:2", 2),  # --gres=gpu:a100:2
        ("gres/nic:1,gres/gpu:8", 8),
        ("gres/nic:1", 0),
        ("", 0),  # asked for no GPU per node: -n must say how many ranks
    ],
)
def test_the_default_ranks_per_node_of_an_allocation_are_its_gpus_per_node(
    tres_per_node: str, gpus: int
) -> None:
    assert gpus_in(tres_per_node) == gpus
