"""Persistent ranks across the nodes of a real Slurm allocation (tests/support/slurm_cluster.py):
``%ddp_start --slurm`` in a kernel started inside ``salloc -N2``, one srun job step whose gloo
ranks keep a DDP model between ``%%ddp`` cells, ``%ddp_status`` naming job, nodes, step and hosts,
interrupts, ``%ddp_restart`` and ``%ddp_stop``; and no job step outliving its kernel, whether the
kernel is shut down or SIGKILLed, for ``%ddp_start --slurm`` and ``%%ddp_launch --slurm`` alike.

The kernels' jobs outlive them (salloc runs a shell around the kernel, as a batch job runs a
Jupyter server), so a step that ends did so because of the kernel's end, not the job's.
Without Slurm or root these skip, except where JUPYTER_GPU_REQUIRE_SLURM=1 (CI): there they fail.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator

import pytest
from support.ddp_kernel import Cell
from support.slurm_cluster import SlurmCluster, alive, need_slurm
from support.slurm_kernel import SlurmKernel
from support.waiting import wait_until

START = "%ddp_start --slurm -n 2 --backend gloo"
STEP_GONE_S = 10.0  # srun's SIGTERM kills the tasks at once: gone from squeue in 0.1-0.2 s here
BUSY = "import time\nprint('busy', flush=True)\nwhile True:\n    time.sleep(0.05)\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    need_slurm()
    # 4 CPUs a node: the module's kernel (2 ranks a node) and one more (1 a node) fit side by side
    with SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2, cpus_per_node=4) as cluster:
        yield cluster
    assert cluster.leftovers() == []


def _kernel(cluster: SlurmCluster, per_node: int) -> SlurmKernel:
    return SlurmKernel(
        cluster, ["-N2", f"--ntasks-per-node={per_node}"], job_outlives_kernel=True, GLOO_SOCKET_IFNAME="eth0"
    )


@pytest.fixture(scope="module")
def kernel(cluster: SlurmCluster) -> Iterator[SlurmKernel]:
    kernel = _kernel(cluster, 2)
    yield kernel
    kernel.close()


def test_srun_refusing_the_step_is_one_line_and_leaves_no_session(kernel: SlurmKernel) -> None:
    cell = kernel.run(START.replace("-n 2", "-n 3"), timeout=120)
    assert cell.error is not None
    assert cell.error["evalue"] == (
        f"srun refused the job step: srun: error: Unable to create step for job {kernel.job}: "
        "More processors requested than permitted"
    )
    assert kernel.run("%ddp_status").stdout.startswith("No DDP session")
    assert not kernel.steps()


def test_persistent_ranks_on_two_nodes_keep_a_ddp_model_between_cells(kernel: SlurmKernel) -> None:
    cell = kernel.run(START, timeout=240)
    assert cell.error is None, cell.traceback + cell.stderr
    assert re.fullmatch(r"4 ranks ready \(gloo on cpu\) in [\d.]+ s on n1, n2\n", cell.stdout), cell.stdout
    assert len(kernel.steps()) == 1
    kernel.run("lr = 0.1")
    cell = kernel.run(
        "%%ddp --push lr\nimport socket\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "torch.manual_seed(RANK)  # other weights on each rank: DDP gives them rank 0's\n"
        "model = DDP(torch.nn.Linear(4, 1))\nopt = torch.optim.SGD(model.parameters(), lr=lr)\nsteps = 0\n",
        timeout=120,
    )
    assert cell.error is None, cell.traceback
    cell = kernel.run(
        "%%ddp --output all --return params\nfor _ in range(5):\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n    steps += 1\n"
        "print(f'{socket.gethostname()}: rank {RANK} local {LOCAL_RANK} of {WORLD_SIZE}, {steps} steps')\n"
        "params = [p.detach().clone() for p in model.parameters()]\n",
        timeout=120,
    )
    assert cell.error is None, cell.traceback
    assert sorted(cell.stdout.splitlines()) == [
        "[n1 rank 0] n1: rank 0 local 0 of 4, 5 steps",
        "[n1 rank 1] n1: rank 1 local 1 of 4, 5 steps",
        "[n2 rank 2] n2: rank 2 local 0 of 4, 5 steps",
        "[n2 rank 3] n2: rank 3 local 1 of 4, 5 steps",
    ]
    assert kernel.params_in_sync() == "[0, 1, 2, 3] True"


def test_status_shows_the_job_its_nodes_the_step_and_each_ranks_host(kernel: SlurmKernel) -> None:
    status = kernel.run("%ddp_status").stdout
    (step,) = kernel.steps()
    assert f"Slurm job {kernel.job}, nodes n1,n2, step {step} RUNNING" in status, status
    for rank, host in enumerate(["n1", "n1", "n2", "n2"]):
        assert re.search(rf"rank {rank}: pid \d+, gloo on cpu, host {host}\n", status), status
    assert "cells run: 2" in status


def test_a_failing_rank_is_named_with_its_node_and_the_others_keep_their_state(kernel: SlurmKernel) -> None:
    cell = kernel.run(
        "%%ddp\nimport socket\nif RANK == 3:\n    raise ValueError(f'bad batch on {socket.gethostname()}')\n"
    )
    assert cell.error is not None
    assert "Error on rank 3 on n2:" in cell.traceback
    assert "ValueError: bad batch on n2" in cell.traceback
    assert "line 4" in cell.traceback  # the cell's own numbering, the magic line counted
    cell = kernel.run("%%ddp --return steps\npass\n")
    assert cell.error is None, cell.traceback
    assert kernel.run("print(_ddp)").stdout.strip() == "{0: 5, 1: 5, 2: 5, 3: 5}"


def test_an_interrupt_stops_the_cell_on_every_node_and_keeps_the_ranks(kernel: SlurmKernel) -> None:
    msg_id = kernel.submit(f"%%ddp --output all\n{BUSY}")
    wait_until("every rank busy", lambda: _count(kernel, msg_id, "busy") == 4, timeout=60)
    kernel.km.interrupt_kernel()
    kernel.wait(msg_id, timeout=60)
    cell = Cell(kernel, msg_id)
    assert cell.error is not None and cell.error["ename"] == "DDPInterrupted", cell.traceback
    for rank in range(4):
        assert f"rank {rank} stopped at line" in cell.traceback
    cell = kernel.run("%%ddp --return steps\npass\n")
    assert cell.error is None, cell.traceback
    assert kernel.run("print(_ddp)").stdout.strip() == "{0: 5, 1: 5, 2: 5, 3: 5}"


def test_restart_makes_a_fresh_step_and_stop_leaves_none(kernel: SlurmKernel) -> None:
    (before,) = kernel.steps()
    cell = kernel.run("%ddp_restart", timeout=240)
    assert cell.stdout.strip() == "4 ranks ready", cell.traceback
    (after,) = kernel.steps()
    assert after != before
    cell = kernel.run("%%ddp\nprint(steps)\n")
    assert "NameError: name 'steps' is not defined" in cell.traceback
    assert kernel.run("%ddp_stop").error is None
    wait_until("no job step left", lambda: not kernel.steps(), timeout=STEP_GONE_S)
    assert kernel.job_running()


@pytest.mark.parametrize(
    ("start", "cell", "end"),
    [
        pytest.param(START.replace("-n 2", "-n 1"), "%%ddp --output all", "SIGKILL", id="session-killed"),
        pytest.param(
            "", "%%ddp_launch --slurm -n 1 --backend gloo --output all", "SIGKILL", id="launch-killed"
        ),
        pytest.param(START.replace("-n 2", "-n 1"), "", "shutdown", id="session-shut-down"),
    ],
)
def test_no_job_step_outlives_its_kernel(cluster: SlurmCluster, start: str, cell: str, end: str) -> None:
    kernel = _kernel(cluster, 1)
    try:
        if start:
            assert kernel.run(start, timeout=240).error is None
        if cell:
            msg_id = kernel.submit(f"{cell}\n{BUSY}")
            wait_until("both ranks busy", lambda: _count(kernel, msg_id, "busy") == 2, timeout=240)
        assert len(kernel.steps()) == 1
        if end == "SIGKILL":
            os.kill(kernel.kernel_pid, signal.SIGKILL)
        else:
            kernel.kc.shutdown()
        wait_until("the kernel to end", lambda: not alive(kernel.kernel_pid), timeout=30)
        wait_until("no job step left", lambda: not kernel.steps(), timeout=STEP_GONE_S)
        assert kernel.job_running()  # the job is still there: the step ended with the kernel
    finally:
        kernel.close()


def _count(kernel: SlurmKernel, msg_id: str, word: str) -> int:
    kernel.pump(0.1)
    text = "".join(m["content"].get("text", "") for m in kernel.messages(msg_id) if m["msg_type"] == "stream")
    return text.count(word)
