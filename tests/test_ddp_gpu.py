"""%%ddp_launch and persistent ranks with NCCL on two GPUs (run on the GPU machine)."""

from __future__ import annotations

import textwrap
import time

import pytest
from support.ddp_kernel import Cell, Kernel, cuda_devices, no_ranks_left

# Rank 1 dies while both ranks are queueing 256 MiB all-reduces.
KILLED_MID_ALL_REDUCE = """\
import os, signal
x = torch.ones(64 * 2**20, device=device)
for step in range(10_000):
    if RANK == 1 and step == 20:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(x)
torch.cuda.synchronize()
"""

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_devices() < 2, reason="needs two CUDA GPUs")]


def test_nccl_all_reduce_after_cuda_was_used_in_the_kernel(gpu_kernel: Kernel) -> None:
    started = time.monotonic()
    cell = gpu_kernel.run(
        textwrap.dedent("""\
        %%ddp_launch -n 2 --output all
        x = torch.full((4,), float(RANK + 1), device=device)
        dist.all_reduce(x)
        print(dist.get_backend(), device, torch.cuda._is_in_bad_fork())
        _result = x
        """)
    )
    assert cell.error is None, cell.traceback
    assert sorted(cell.stdout.splitlines()) == ["[rank 0] nccl cuda:0 False", "[rank 1] nccl cuda:1 False"]
    values = gpu_kernel.run("print({r: (v.device.type, v.tolist()) for r, v in _ddp.items()})").stdout
    assert values.strip() == "{0: ('cpu', [3.0, 3.0, 3.0, 3.0]), 1: ('cpu', [3.0, 3.0, 3.0, 3.0])}"
    assert time.monotonic() - started < 30


def test_a_second_launch_is_fast(gpu_kernel: Kernel) -> None:
    gpu_kernel.run("%%ddp_launch -n 2\nx = torch.ones(1, device=device)\ndist.all_reduce(x)\n")
    started = time.monotonic()
    cell = gpu_kernel.run("%%ddp_launch -n 2\nx = torch.ones(1, device=device)\ndist.all_reduce(x)\n")
    assert cell.error is None, cell.traceback
    assert time.monotonic() - started < 5


def test_gpus_option_maps_ranks_to_the_listed_devices(gpu_kernel: Kernel) -> None:
    cell = gpu_kernel.run(
        "%%ddp_launch --gpus 1 --output all\n"
        "print(torch.cuda.device_count(), torch.cuda.get_device_properties(device).uuid)\n"
    )
    assert cell.error is None, cell.traceback
    uuid_1 = gpu_kernel.run("print(torch.cuda.get_device_properties(1).uuid)").stdout.strip()
    assert cell.stdout.split() == ["[rank", "0]", "1", uuid_1]


def test_a_rank_killed_mid_all_reduce_stops_the_other_quickly(gpu_kernel: Kernel) -> None:
    started = time.monotonic()
    cell = gpu_kernel.run("%%ddp_launch -n 2\n" + KILLED_MID_ALL_REDUCE, timeout=60)
    elapsed = time.monotonic() - started
    assert cell.error is not None
    assert "rank 1 (pid" in cell.traceback and "killed by SIGKILL" in cell.traceback
    assert elapsed < 20, f"took {elapsed:.1f} s"
    assert no_ranks_left(gpu_kernel.pid)


def test_a_raising_rank_with_nccl_shows_cell_lines(gpu_kernel: Kernel) -> None:
    cell = gpu_kernel.run(
        textwrap.dedent("""\
        %%ddp_launch -n 2
        x = torch.ones(1, device=device)
        if RANK == 0:
            raise RuntimeError("rank 0 fails on the GPU")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        """)
    )
    assert "Error on rank 0:" in cell.traceback and "line 4" in cell.traceback
    assert no_ranks_left(gpu_kernel.pid)


def test_persistent_ranks_with_nccl_survive_an_interrupt_or_restart(gpu_kernel: Kernel) -> None:
    assert gpu_kernel.run("%ddp_start -n 2").error is None
    try:
        gpu_kernel.run("%%ddp\nw = torch.randn(1024, 1024, device=device)\n")
        msg_id = gpu_kernel.submit(
            "%%ddp\nimport time\nprint('busy', flush=True)\n"
            "while True:\n    w = w @ w\n    w /= w.norm()\n    torch.cuda.synchronize()\n"
        )
        gpu_kernel.wait_for_text(msg_id, "busy")
        gpu_kernel.km.interrupt_kernel()
        gpu_kernel.wait(msg_id, timeout=30)
        assert Cell(gpu_kernel, msg_id).error["ename"] == "DDPInterrupted"
        cell = gpu_kernel.run(
            "%%ddp --return n\nx = torch.ones(1, device=device)\ndist.all_reduce(x)\nn = x.item()\n"
        )
        if cell.error is not None:  # the interrupt may have left the process group unusable
            assert gpu_kernel.run("%ddp_restart").error is None
            cell = gpu_kernel.run(
                "%%ddp --return n\nx = torch.ones(1, device=device)\ndist.all_reduce(x)\nn = x.item()\n"
            )
        assert cell.error is None, cell.traceback
        assert gpu_kernel.run("print(_ddp)").stdout.strip() == "{0: 2.0, 1: 2.0}"
    finally:
        gpu_kernel.run("%ddp_stop")
    assert no_ranks_left(gpu_kernel.pid)


def test_a_rank_killed_mid_all_reduce_in_a_session_needs_a_restart(gpu_kernel: Kernel) -> None:
    assert gpu_kernel.run("%ddp_start -n 2").error is None
    try:
        cell = gpu_kernel.run("%%ddp\n" + KILLED_MID_ALL_REDUCE, timeout=60)
        assert "killed by SIGKILL" in cell.traceback and "%ddp_restart" in cell.traceback
        assert gpu_kernel.run("%ddp_restart").error is None
        assert gpu_kernel.run("%%ddp\nx = torch.ones(1, device=device)\ndist.all_reduce(x)\n").error is None
    finally:
        gpu_kernel.run("%ddp_stop")
