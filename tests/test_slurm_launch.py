"""``%%ddp_launch --slurm`` against a real Slurm (tests/support/slurm_cluster.py): a kernel
started inside ``salloc -N2 --ntasks-per-node=2`` as a user would, its cells run by srun on
both nodes with gloo ranks, output and errors named by node, pushes and returns across nodes,
and the session's key nowhere on a command line.

Without Slurm or root these skip, except where JUPYTER_GPU_REQUIRE_SLURM=1 (CI): there they fail.
"""

from __future__ import annotations

import base64
import pickle
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.ddp_kernel import Kernel
from support.slurm_cluster import SlurmCluster
from support.slurm_fixtures import two_nodes
from support.slurm_kernel import SlurmKernel
from support.waiting import wait_until

from jupyter_gpu.ddp.slurm import SlurmError, allocation
from jupyter_gpu.ddp.slurm_rank import CONFIG_ENV

LAUNCH = "%%ddp_launch --slurm -n 2 --backend gloo"

TRAIN = f"""{LAUNCH} --output all --return params
import socket
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(RANK)  # each rank starts from other weights: DDP gives them rank 0's
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained on {{socket.gethostname()}}: rank {{RANK}} local {{LOCAL_RANK}} of {{WORLD_SIZE}}")
params = [p.detach().clone() for p in model.parameters()]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    yield from two_nodes(tmp_path_factory)


@pytest.fixture(scope="module")
def kernel(cluster: SlurmCluster) -> Iterator[SlurmKernel]:
    kernel = SlurmKernel(cluster, ["-N2", "--ntasks-per-node=2"], GLOO_SOCKET_IFNAME="eth0")
    yield kernel
    kernel.close()


def test_two_nodes_of_two_ranks_train_a_ddp_model_in_sync(kernel: SlurmKernel) -> None:
    cell = kernel.run(TRAIN, timeout=240)
    assert cell.error is None, cell.traceback + cell.stderr
    lines = sorted(line for line in cell.stdout.splitlines() if "trained on" in line)
    assert lines == [
        "[n1 rank 0] trained on n1: rank 0 local 0 of 4",
        "[n1 rank 1] trained on n1: rank 1 local 1 of 4",
        "[n2 rank 2] trained on n2: rank 2 local 0 of 4",
        "[n2 rank 3] trained on n2: rank 3 local 1 of 4",
    ]
    assert kernel.params_in_sync() == "[0, 1, 2, 3] True"


def test_a_rank_raising_on_node_2_shows_its_traceback_named_and_the_step_is_cancelled(
    kernel: SlurmKernel,
) -> None:
    cell = kernel.run(
        f"{LAUNCH}\nimport socket\nif RANK == 3:\n    raise ValueError(f'bad batch on {{socket.gethostname()}}')\n"
        "dist.barrier()\n",
        timeout=240,
    )
    assert cell.error is not None
    assert "Error on rank 3 on n2:" in cell.traceback
    assert "ValueError: bad batch on n2" in cell.traceback
    assert "line 4" in cell.traceback  # the cell's own numbering, the magic line counted
    wait_until("the launch's job step to leave squeue", lambda: not kernel.steps(), timeout=60)


def test_push_and_return_cross_nodes_and_nodes_takes_the_first(kernel: SlurmKernel) -> None:
    kernel.run("scale = {'k': 7}")
    cell = kernel.run(
        f"{LAUNCH} --push scale --return out\nimport socket\nout = (scale['k'], LOCAL_RANK, socket.gethostname())\n",
        timeout=240,
    )
    assert cell.error is None, cell.traceback
    got = kernel.run("print(_ddp)").stdout.strip()
    assert got == "{0: (7, 0, 'n1'), 1: (7, 1, 'n1'), 2: (7, 0, 'n2'), 3: (7, 1, 'n2')}"
    cell = kernel.run(
        f"{LAUNCH} --nodes 1 --return out\nimport socket\nout = socket.gethostname()\n", timeout=240
    )
    assert cell.error is None, cell.traceback
    assert kernel.run("print(_ddp)").stdout.strip() == "{0: 'n1', 1: 'n1'}"


def test_the_session_key_is_on_no_command_line(
    kernel: SlurmKernel, cluster: SlurmCluster, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    msg_id = kernel.submit(
        f"{LAUNCH} --output all\nimport os, time\nprint('waiting', flush=True)\n"
        f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.05)\n"
    )
    try:
        wait_until("every rank waiting", lambda: _waiting(kernel, msg_id) == 4, timeout=240)
        ours = set(cluster.pids())  # not the ranks of another cluster's test running beside this one
        ranks = [p for p in psutil.process_iter(["name", "cmdline"]) if p.pid in ours and _is_rank(p.info)]
        assert len(ranks) == 4, ranks
        config = pickle.loads(base64.b64decode(_environ(ranks[0].pid)[CONFIG_ENV]))
        secrets = [config.key.hex(), config.key.hex().upper(), _environ(ranks[0].pid)[CONFIG_ENV][:40]]
        args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert "srun" in args and "slurm_rank" in args
        assert not [s for s in secrets if s in args]
        assert not [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if config.key in " ".join(p.info["cmdline"] or []).encode()
        ]
    finally:
        flag.write_text("go")
    kernel.wait(msg_id, timeout=120)


def _waiting(kernel: SlurmKernel, msg_id: str) -> int:
    kernel.pump(0.1)
    text = "".join(m["content"].get("text", "") for m in kernel.messages(msg_id) if m["msg_type"] == "stream")
    return text.count("waiting")


def _is_rank(info: dict[str, Any]) -> bool:
    """A rank's process (python), not srun's, whose command line names the entry too."""
    return info["name"] != "srun" and "jupyter_gpu.ddp.slurm_rank" in " ".join(info["cmdline"] or [])


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_srun_refusing_the_step_is_one_line_in_its_own_words(
    kernel: SlurmKernel, cluster: SlurmCluster
) -> None:
    cell = kernel.run("%%ddp_launch --slurm -n 3 --backend gloo\nprint('never')\n", timeout=120)
    assert cell.error is not None
    assert cell.error["evalue"] == (
        f"srun refused the job step: srun: error: Unable to create step for job {kernel.job}: "
        "More processors requested than permitted"
    )
    assert "never" not in cell.stdout
    cell = kernel.run("%%ddp_launch --slurm -n 1 --nodes 3\nprint('never')\n")
    assert cell.stderr.strip() == f"UsageError: --nodes 3: job {kernel.job} has 2 nodes (n1,n2)"


def test_a_rank_exiting_on_node_2_is_named_and_ends_the_step(kernel: SlurmKernel) -> None:
    cell = kernel.run(f"{LAUNCH}\nimport os\nif RANK == 3:\n    os._exit(3)\ndist.barrier()\n", timeout=240)
    assert cell.error is not None
    assert cell.error["evalue"] == "rank 3 (on n2) exited with code 3", cell.traceback
    wait_until("the launch's job step to leave squeue", lambda: not kernel.steps(), timeout=60)


def test_outside_an_allocation_and_without_slurm_the_error_says_so(
    ddp_kernel: Kernel, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cell = ddp_kernel.run("%%ddp_launch --slurm -n 2\nprint('never')\n")
    assert cell.stderr.startswith(
        "UsageError: --slurm runs inside a Slurm allocation and this kernel is in none"
    )
    assert cell.stderr.count("\n") == 1 and "never" not in cell.stdout
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError, match=r"^--slurm: no Slurm on this machine \(srun is not on PATH\)$"):
        allocation()
