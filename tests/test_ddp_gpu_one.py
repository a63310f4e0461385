"""The DDP channel with NCCL on one GPU (run on the GPU machine): works after the kernel used
CUDA, listens on loopback only (NCCL's bootstrap included) and runs nothing a stranger plants."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _ddp_kernel import Kernel, cuda_devices, gpu_kernel, no_ranks_left  # noqa: F401 - gpu_kernel is a fixture
from test_ddp_security import LOOPBACK, Payload, attacker_store, listeners, plant, store_port

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_devices() < 1, reason="needs a CUDA GPU")]


def test_nccl_launch_returns_the_rank_result(gpu_kernel: Kernel) -> None:
    cell = gpu_kernel.run(
        textwrap.dedent("""\
        %%ddp_launch -n 1 --output all
        x = torch.full((4,), 2.0, device=device)
        dist.all_reduce(x)
        print(dist.get_backend(), device)
        _result = x
        """)
    )
    assert cell.error is None, cell.traceback
    assert cell.stdout.strip() == "[rank 0] nccl cuda:0"
    values = gpu_kernel.run("print(_ddp[0].device.type, _ddp[0].tolist())").stdout
    assert values.strip() == "cpu [2.0, 2.0, 2.0, 2.0]"


def test_an_nccl_session_listens_on_loopback_and_runs_nothing_planted(
    gpu_kernel: Kernel, tmp_path: Path
) -> None:
    assert gpu_kernel.run("%ddp_start -n 1").error is None
    try:
        cell = gpu_kernel.run(
            "%%ddp --return n\nx = torch.ones(1, device=device)\n"
            "dist.all_reduce(x)\nn = (dist.get_backend(), x.item())\n"
        )
        assert cell.error is None, cell.traceback
        assert gpu_kernel.run("print(_ddp)").stdout.strip() == "{0: ('nccl', 1.0)}"
        everything = listeners(gpu_kernel.pid)
        assert everything and all(ip in LOOPBACK for ip, _ in everything), everything

        marker = tmp_path / "ran"
        plant(attacker_store(store_port(gpu_kernel)), Payload(marker), range(1, 8))
        cell = gpu_kernel.run("%%ddp --return n\nn = torch.cuda.memory_allocated(device) >= 0\n", timeout=60)
        assert cell.error is None, cell.traceback
        assert gpu_kernel.run("print(_ddp)").stdout.strip() == "{0: True}"
        assert not marker.exists()
    finally:
        gpu_kernel.run("%ddp_stop")
    assert no_ranks_left(gpu_kernel.pid)


def test_the_cell_timeline_has_rank_0s_own_figures(gpu_kernel: Kernel) -> None:
    """The kernel's allocator does not see the ranks' memory: rank 0 measures its own, against
    torch's figure in the rank."""
    assert (
        gpu_kernel.run(
            "from jupyter_gpu.kernel import timeline\n_undo = timeline.register(get_ipython())"
        ).error
        is None
    )
    cell = gpu_kernel.run(
        "%%ddp_launch -n 1 --return held\n"
        "kept = torch.empty(2**30, dtype=torch.uint8, device=device)\n"
        "held = torch.cuda.memory_allocated(device)\n"
    )
    assert cell.error is None, cell.traceback
    cell = gpu_kernel.run(
        "import json\nfrom jupyter_gpu.kernel.timeline import timeline_of\n"
        "_rec = timeline_of(get_ipython()).cells()[-1]\n"
        "print(json.dumps([_rec['ranks'], _ddp[0]]))"
    )
    ranks, held = __import__("json").loads(cell.stdout)
    (rank0,) = ranks
    (gpu,) = rank0["gpus"]
    assert rank0["rank"] == 0 and gpu["allocated_bytes"] == held
    assert gpu["allocated_change_bytes"] == pytest.approx(2**30, rel=0.01)
    assert gpu["peak_allocated_bytes"] >= 2**30 and gpu["process_change_bytes"] is None
