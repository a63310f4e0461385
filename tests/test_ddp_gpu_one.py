"""The DDP channel with NCCL on one GPU (run on the GPU machine): works after the kernel used
CUDA, listens on loopback only (NCCL's bootstrap included) and keeps its channel private."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest
from support.ddp_checkpoints import MODEL, STEP
from support.ddp_kernel import Kernel, cuda_devices, no_ranks_left
from support.processes import listeners

LOOPBACK = ("127.0.0.1", "::1")
CHANNEL_PATH = "print(get_ipython().magics_manager.registry['DDPMagics'].session.gang.channel.path)"

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


def test_an_nccl_session_listens_on_loopback_and_keeps_its_channel_private(gpu_kernel: Kernel) -> None:
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

        folder = os.path.dirname(gpu_kernel.run(CHANNEL_PATH).stdout.strip())
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.getuid()
        cell = gpu_kernel.run("%%ddp --return n\nn = torch.cuda.memory_allocated(device) >= 0\n", timeout=60)
        assert cell.error is None, cell.traceback
        assert gpu_kernel.run("print(_ddp)").stdout.strip() == "{0: True}"
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


def test_fsdp2_on_one_nccl_rank_in_bf16_trains_saves_and_loads(gpu_kernel: Kernel, tmp_path: Path) -> None:
    """FSDP2 with NCCL and bf16 mixed precision; the rank's memory line against torch's own
    figure in the rank; a DCP checkpoint saved and loaded back into fresh ranks."""
    ckpt = tmp_path / "ckpt"
    assert gpu_kernel.run("%ddp_start -n 1 --fsdp").error is None
    try:
        build = (
            "%%ddp --return allocated\n" + MODEL + STEP + "torch.manual_seed(0)\n"
            "model = shard(Tiny(width=1024, blocks=4), mixed_precision='bf16')\n"
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
            "losses = [step(model, opt, n) for n in range(5)]\n"
            "allocated = torch.cuda.memory_allocated(device)\n"
        )
        cell = gpu_kernel.run(build, timeout=180)
        assert cell.error is None, cell.traceback
        assert "mixed precision bf16" in cell.stdout and "over 1 ranks (cuda)" in cell.stdout
        (line,) = [s for s in cell.stdout.splitlines() if s.startswith("rank 0: ")]
        shown = gpu_kernel.run(
            "from jupyter_gpu.analysis.units import format_bytes\nprint(format_bytes(_ddp[0]))"
        ).stdout.strip()
        assert f"GPU 0 allocated {shown}," in line, (line, shown)
        print(line)
        saved = gpu_kernel.run(f"%ddp_save {ckpt} --model model --optimizer opt", timeout=120)
        assert (
            saved.error is None and "Saved model 'model' and optimizer 'opt' from 1 ranks" in saved.stdout
        ), saved.traceback + saved.stderr
        before = gpu_kernel.run("%%ddp --return nxt\nnxt = step(model, opt, 5)\n", timeout=60)
        assert before.error is None, before.traceback
        expected = gpu_kernel.run("print(_ddp[0])").stdout.strip()
        assert gpu_kernel.run("%ddp_restart").error is None
        fresh = (
            "%%ddp\n" + MODEL + STEP + "torch.manual_seed(9)\n"
            "model = shard(Tiny(width=1024, blocks=4), mixed_precision='bf16', quiet=True)\n"
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        )
        assert gpu_kernel.run(fresh, timeout=120).error is None
        loaded = gpu_kernel.run(f"%ddp_load {ckpt} --model model --optimizer opt", timeout=120)
        assert loaded.error is None and "on 1 ranks" in loaded.stdout, loaded.traceback + loaded.stderr
        after = gpu_kernel.run("%%ddp --return nxt\nnxt = step(model, opt, 5)\n", timeout=60)
        assert after.error is None, after.traceback
        assert gpu_kernel.run("print(_ddp[0])").stdout.strip() == expected  # the run resumes exactly
    finally:
        gpu_kernel.run("%ddp_stop")
    assert no_ranks_left(gpu_kernel.pid)


def test_gloo_ranks_beyond_the_gpus_run_on_the_cpu(gpu_kernel: Kernel) -> None:
    """The issue's case: `%%ddp_launch -n 2 --backend gloo` on a machine with one GPU."""
    cell = gpu_kernel.run(
        "%%ddp_launch -n 2 --backend gloo --output all\n"
        "x = torch.ones(1)\ndist.all_reduce(x)\n"
        "print(device, torch.cuda.is_available(), x.item())\n",
        timeout=120,
    )
    assert cell.error is None, cell.traceback
    assert "every rank runs on the CPU with gloo" in cell.stdout
    assert sorted(s for s in cell.stdout.splitlines() if s.startswith("[rank")) == [
        "[rank 0] cpu False 2.0",
        "[rank 1] cpu False 2.0",
    ]
