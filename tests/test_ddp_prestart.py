"""The rank forkserver starts in the background before the first ``%%ddp_launch`` needs it
(issue #32): with one GPU once the notebook has imported torch, never before (the kernel pays
nothing until then), never where ``JUPYTER_GPU_DDP_PRESTART=0``. A real kernel; its NVML view of
the GPUs is set to one, as on a one-GPU machine."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support.ddp_kernel import Kernel, helper_processes

ONE_GPU_THEN_LOAD = (
    "import sys, jupyter_gpu.nvml.visible as visible\n"
    "visible.visible_gpus = lambda: 1  # as NVML counts them on a one-GPU machine\n"
    "from jupyter_gpu.kernel.ddp.magics import register\n"
    "undo = register(get_ipython())\n"
    "print('torch' in sys.modules)"
)


def forkserver(kernel: Kernel) -> bool:
    return any("multiprocessing.forkserver" in c for c in helper_processes(kernel.pid))


@pytest.fixture
def kernel(request) -> Iterator[Kernel]:
    kernel = Kernel(JUPYTER_GPU_DDP_PRESTART=request.param)
    yield kernel
    kernel.close()


@pytest.mark.parametrize("kernel", ["1"], indirect=True)
def test_with_one_gpu_it_starts_once_the_notebook_imports_torch(kernel: Kernel) -> None:
    loaded = kernel.run(ONE_GPU_THEN_LOAD)
    assert loaded.stdout.strip() == "False", loaded.traceback  # no torch in the kernel yet
    kernel.run("x = 1")
    assert not forkserver(kernel)  # loading and a cell without torch start nothing
    assert kernel.run("import torch").error is None
    deadline = time.monotonic() + 30
    while not forkserver(kernel):
        assert time.monotonic() < deadline, "no forkserver 30 s after the notebook imported torch"
        time.sleep(0.1)
    launched = kernel.run(
        "%%ddp_launch -n 2 --backend gloo --device cpu\nprint('rank', RANK, 'of', WORLD_SIZE)"
    )
    assert launched.error is None, launched.traceback
    assert "rank 0 of 2" in launched.stdout  # the prestarted forkserver starts ranks that work


@pytest.mark.parametrize("kernel", ["0"], indirect=True)
def test_prestart_0_leaves_it_to_the_first_launch(kernel: Kernel) -> None:
    assert kernel.run(ONE_GPU_THEN_LOAD).error is None
    assert kernel.run("import torch").error is None
    kernel.pump(2.0)  # what a background start would have done by now, it would have begun
    assert not forkserver(kernel)
