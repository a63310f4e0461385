"""The tests' Slurm cluster (tests/support/slurm_cluster.py) is real enough for ``%%ddp_launch
--slurm``: srun places tasks on both nodes, a 4-rank gloo all-reduce meets across them through a
c10d rendezvous on the first node's eth0, an allocation shows in squeue and scancel removes it,
and stop() leaves no namespace, daemon, job or file behind, even after a failed start.

Without Slurm or root these skip, except where JUPYTER_GPU_REQUIRE_SLURM=1 (CI): there they fail.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.slurm_cluster import SlurmCluster, SlurmClusterError, alive, need_slurm
from support.waiting import wait_until

ALLREDUCE = textwrap.dedent("""
    import os, socket
    import torch, torch.distributed as dist
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    print(rank, socket.gethostname(), int(value.item()), flush=True)
    dist.destroy_process_group()
""")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    need_slurm()
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus_per_node=2) as cluster:
        yield cluster


def _queued(cluster: SlurmCluster) -> set[str]:
    return set(cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split())


def test_srun_places_two_tasks_on_each_node(cluster: SlurmCluster) -> None:
    done = cluster.run(["srun", "-N2", "--ntasks-per-node=2", "hostname"], timeout=60)
    assert sorted(done.stdout.split()) == ["n1", "n1", "n2", "n2"]


def test_a_four_rank_gloo_all_reduce_meets_across_both_nodes(cluster: SlurmCluster) -> None:
    env = {
        "MASTER_ADDR": cluster.addresses["n1"],  # rank 0's node: SLURM_PROCID 0 runs on n1
        "MASTER_PORT": "29500",  # free: nothing else listens in the node's namespace
        "GLOO_SOCKET_IFNAME": "eth0",  # else gloo takes 127.0.0.1 and the mesh fails
    }
    argv = ["srun", "-N2", "--ntasks-per-node=2", "--kill-on-bad-exit=1", sys.executable, "-c", ALLREDUCE]
    done = cluster.run(argv, env=env, timeout=180)
    lines = sorted(tuple(line.split()) for line in done.stdout.splitlines())
    assert lines == [("0", "n1", "10"), ("1", "n1", "10"), ("2", "n2", "10"), ("3", "n2", "10")], done.stderr


def test_an_allocation_shows_in_squeue_until_scancel(cluster: SlurmCluster) -> None:
    done = cluster.run(["salloc", "--no-shell", "-N2"], timeout=60)
    found = re.search(r"Granted job allocation (\d+)", done.stderr + done.stdout)
    assert found, done.stderr
    job = found[1]
    states = cluster.run(["squeue", "-h", "-j", job, "-o", "%T %D %N"]).stdout.split()
    assert states == ["RUNNING", "2", "n[1-2]"]
    cluster.run(["scancel", job])
    wait_until(f"job {job} to leave squeue", lambda: job not in _queued(cluster), timeout=30)


def test_stop_leaves_nothing_behind_with_a_job_running(tmp_path: Path) -> None:
    need_slurm()
    cluster = SlurmCluster(tmp_path, nodes=2, cpus_per_node=2)
    try:
        cluster.start()
        job = cluster.run(["sbatch", "--parsable", "-N2", "--wrap", "srun sleep 600"]).stdout.strip()
        wait_until(
            f"job {job} running",
            lambda: "RUNNING" in cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout,
            30,
        )
        # A process like a user kernel, in the lab namespace: stop() must end it too.
        cluster.popen([sys.executable, "-c", "import time; time.sleep(600)"])
        wait_until("the job's sleep on both nodes", lambda: _comms(cluster.pids()).count("sleep") == 2, 30)
        running = cluster.pids()
        assert {"munged", "slurmctld", "slurmd", "slurmstepd", "python"} <= set(_comms(running))
    finally:
        cluster.stop()
    assert cluster.leftovers() == []
    assert list(filter(alive, running)) == []


def test_a_failed_start_names_the_daemon_with_its_log_and_undoes_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_slurm()
    write_config = SlurmCluster._write_config

    def broken(self: SlurmCluster) -> None:
        write_config(self)
        with self.conf.open("a") as conf:
            conf.write("NoSuchSlurmOption=1\n")

    monkeypatch.setattr(SlurmCluster, "_write_config", broken)
    cluster = SlurmCluster(tmp_path)
    with pytest.raises(SlurmClusterError) as failed:
        cluster.start(timeout=30)
    assert "slurmctld exited" in str(failed.value)
    assert "NoSuchSlurmOption" in str(failed.value)  # from slurmctld's own output
    assert cluster.leftovers() == []


def _comms(pids: list[int]) -> list[str]:
    names = []
    for pid in pids:
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names
