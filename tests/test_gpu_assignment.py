"""New kernels spread over the GPUs (issue #28, ``c.GPUMonitor.assign_gpus``): each kernel the
server starts gets CUDA_VISIBLE_DEVICES naming the GPU with the most free memory, counting the
kernels already sent to a GPU that hold nothing there yet. Real server and kernels, the simulated
two-H200 machine (GPU 0 has 3 GiB in use, GPU 1 almost nothing)."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.jupyter_api import get, start_notebook_kernel
from support.kernel_client import CellRunner
from support.paths import MIG_READINGS
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpu.server.app import GPUMonitor

GIB = 2**30
GPU0, GPU1 = "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5", "GPU-d57917b3-7a1d-3f45-579e-d0c856ed9f9d"


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config: dict, monkeypatch) -> dict:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return {**gpu_monitor_config, "assign_gpus": "least_used", "kernel_memory_limit": 14 * GIB}


async def visible_devices(jp_serverapp, kernel_id: str) -> str | None:
    async with CellRunner(jp_serverapp.kernel_manager.get_kernel(kernel_id)) as cells:
        cell = await cells.run("import os, json; print(json.dumps(os.environ.get('CUDA_VISIBLE_DEVICES')))")
        assert cell.ok, cell.traceback
        return json.loads(cell.stream())


async def test_four_kernels_started_together_are_spread_over_two_gpus(
    jp_fetch, jp_serverapp, gpu_monitor, kernel_env
):
    kernels = [await start_notebook_kernel(jp_fetch, f"course/student{n}.ipynb") for n in range(4)]
    # GPU 1 has the most free; then each kernel sent there counts as its 14 GiB quota
    assert [await visible_devices(jp_serverapp, k) for k in kernels] == [GPU1, GPU0, GPU1, GPU0]
    reply = {k["id"]: k for k in (await get(jp_fetch, "kernels"))["kernels"]}
    assert [reply[k]["assigned_gpus"] for k in kernels] == [[GPU1], [GPU0], [GPU1], [GPU0]]


async def test_kernels_started_at_the_same_moment_are_spread_too(
    jp_fetch, jp_serverapp, gpu_monitor, kernel_env
):
    """A restored workspace opens every notebook at once: each pick counts before its kernel runs."""
    kernels = await asyncio.gather(*(start_notebook_kernel(jp_fetch, f"lab/{n}.ipynb") for n in range(4)))
    placed = [await visible_devices(jp_serverapp, k) for k in kernels]
    assert sorted(placed) == sorted([GPU0, GPU0, GPU1, GPU1]), placed


async def test_a_shut_down_kernel_no_longer_counts(jp_fetch, jp_serverapp, gpu_monitor, kernel_env):
    first = await start_notebook_kernel(jp_fetch, "first.ipynb")
    assert await visible_devices(jp_serverapp, first) == GPU1
    await jp_fetch("api", "kernels", first, method="DELETE")
    second = await start_notebook_kernel(jp_fetch, "second.ipynb")
    assert await visible_devices(jp_serverapp, second) == GPU1  # not GPU 0: the first is gone


async def test_a_restarted_kernel_keeps_its_gpu(jp_fetch, jp_serverapp, gpu_monitor, kernel_env):
    kernel_id = await start_notebook_kernel(jp_fetch, "mine.ipynb")
    await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body="")
    assert await visible_devices(jp_serverapp, kernel_id) == GPU1


async def test_the_users_own_choice_is_kept(jp_fetch, jp_serverapp, gpu_monitor, kernel_env, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # e.g. a Slurm job's GPU
    kernel_id = await start_notebook_kernel(jp_fetch, "slurm.ipynb")
    assert await visible_devices(jp_serverapp, kernel_id) == "0"
    (kernel,) = (await get(jp_fetch, "kernels"))["kernels"]
    assert kernel["assigned_gpus"] is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("most_free", "'most_free' is not 'none', 'least_used' or 'least_used:N' with N ≥ 1"),
        ("least_used:0", "'least_used:0' is not"),
    ],
)
def test_an_unknown_assignment_is_a_configuration_error(value, says):
    with pytest.raises(TraitError, match=f"c.GPUMonitor.assign_gpus: {says}"):
        GPUMonitor(config=Config({"GPUMonitor": {"assign_gpus": value}}))


def assigning(readings: str, assign: str) -> GPUMonitor:
    return GPUMonitor(
        config=Config(
            {"GPUMonitor": {"backend": "simulated", "simulated_readings": readings, "assign_gpus": assign}}
        )
    )


def test_more_gpus_per_kernel_than_there_are_is_a_configuration_error(gpu_monitor_config):
    app = assigning(gpu_monitor_config["simulated_readings"], "least_used:3")
    with pytest.raises(TraitError, match=r"asks for more GPUs per kernel than this machine has \(2\)"):
        app._kernel_environment(app._reader_factory())


def test_mig_devices_are_given_one_per_kernel_never_several():
    # GPU 0 split in three MIG devices, GPU 1 whole: three slices, but one whole GPU to combine
    one = assigning(str(MIG_READINGS), "least_used")
    assert one._kernel_environment(one._reader_factory()) == (None, 1)
    two = assigning(str(MIG_READINGS), "least_used:2")
    with pytest.raises(TraitError, match=r"this machine has \(1\) \(a process sees one MIG device only"):
        two._kernel_environment(two._reader_factory())
