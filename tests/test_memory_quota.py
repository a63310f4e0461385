"""Memory quotas per kernel (issue #28): ``c.GPUMonitor.kernel_memory_limit`` (or the Hub's
``JUPYTER_GPU_KERNEL_MEMORY_LIMIT``) reaches every kernel the server starts as PyTorch's own
allocator limit, beside what the user set there; the kernels reply and the out-of-memory
explanation say it. Real server and kernels, simulated GPUs (2 × H200)."""

from __future__ import annotations

import json

import pytest
from IPython.utils.capture import capture_output
from support.fake_torch import FakeCuda, install
from support.ipython_shell import shell_with
from support.jupyter_api import get, start_notebook_kernel
from support.kernel_client import CellRunner
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpu.analysis.alloc_conf import quota_fraction, with_memory_fraction
from jupyter_gpu.kernel import oom
from jupyter_gpu.server.app import GPUMonitor

GIB = 2**30
LIMIT = 14 * GIB
SHOW_ENV = "import os, json; print(json.dumps({k: os.environ.get(k) for k in ('PYTORCH_CUDA_ALLOC_CONF', 'JUPYTER_GPU_KERNEL_MEMORY_LIMIT', 'JUPYTER_GPU_KERNEL_MEMORY_LIMIT_SOURCE', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')}))"


def test_the_quota_joins_what_the_user_set_and_never_raises_theirs():
    assert with_memory_fraction(None, 0.25) == "per_process_memory_fraction:0.25"
    assert (
        with_memory_fraction("expandable_segments:True,roundup_power2_divisions:[256:1,>:4]", 0.25)
        == "expandable_segments:True,roundup_power2_divisions:[256:1,>:4],per_process_memory_fraction:0.25"
    )
    assert with_memory_fraction("per_process_memory_fraction:0.1", 0.25).endswith(":0.1")  # theirs is tighter
    assert with_memory_fraction("per_process_memory_fraction:0.9", 0.25).endswith(":0.25")
    assert with_memory_fraction("per_process_memory_fraction:lots", 0.25).endswith(":0.25")
    # of the largest GPU, rounded down: no GPU lets a kernel take more than the quota
    fraction = float(
        with_memory_fraction(None, quota_fraction(LIMIT, [80 * GIB, 150754820096])).split(":")[1]
    )
    assert fraction * 150754820096 <= LIMIT < (fraction + 1e-6) * 150754820096


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config: dict, request, monkeypatch) -> dict:
    """``{"trait": bytes}`` sets the trait; ``{"env": text}`` the server's environment, as a Hub's
    spawner would."""
    given = getattr(request, "param", {})
    if "env" in given:
        monkeypatch.setenv("JUPYTER_GPU_KERNEL_MEMORY_LIMIT", given["env"])
    config = {**gpu_monitor_config}
    if "trait" in given:
        config["kernel_memory_limit"] = given["trait"]
    if given.get("mps"):
        config["mps_memory_limit"] = True
    return config


async def environment_of(jp_serverapp, kernel_id: str) -> dict:
    async with CellRunner(jp_serverapp.kernel_manager.get_kernel(kernel_id)) as cells:
        cell = await cells.run(SHOW_ENV)
        assert cell.ok, cell.traceback
        return json.loads(cell.stream())


@pytest.mark.parametrize("gpu_monitor_config", [{"trait": LIMIT}], indirect=True)
async def test_each_kernel_starts_with_the_quota_and_keeps_it_on_restart(
    jp_fetch, jp_serverapp, gpu_monitor, kernel_env, monkeypatch
):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # the user's own
    kernel_id = await start_notebook_kernel(jp_fetch, "course/train.ipynb")
    total = max(d["memory_total_bytes"] for d in (await get(jp_fetch, "devices"))["devices"])
    for _ in ("started", "restarted"):
        env = await environment_of(jp_serverapp, kernel_id)
        user, quota = env["PYTORCH_CUDA_ALLOC_CONF"].split(",")
        assert user == "expandable_segments:True"
        key, fraction = quota.split(":")
        assert key == "per_process_memory_fraction"
        assert LIMIT - 2**20 < float(fraction) * total <= LIMIT
        assert env["JUPYTER_GPU_KERNEL_MEMORY_LIMIT"] == str(LIMIT)
        assert env["JUPYTER_GPU_KERNEL_MEMORY_LIMIT_SOURCE"] == "c.GPUMonitor.kernel_memory_limit"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] is None  # MPS's hard limit only when asked
        await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body="")
    (kernel,) = (await get(jp_fetch, "kernels"))["kernels"]
    assert kernel["memory_limit_bytes"] == LIMIT


@pytest.mark.parametrize("gpu_monitor_config", [{"trait": LIMIT, "mps": True}], indirect=True)
@pytest.mark.parametrize(
    ("visible", "limits"),
    [(None, "0=14336M,1=14336M"), ("GPU-d57917b3-7a1d-3f45-579e-d0c856ed9f9d", "0=14336M")],
)
async def test_with_mps_the_quota_is_also_its_hard_limit(
    jp_fetch, jp_serverapp, gpu_monitor, kernel_env, monkeypatch, visible, limits
):
    if visible is not None:  # the user's own choice: CUDA numbers that one device 0
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    kernel_id = await start_notebook_kernel(jp_fetch, "mps.ipynb")
    env = await environment_of(jp_serverapp, kernel_id)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == limits  # each device the kernel sees, no other


@pytest.mark.parametrize("gpu_monitor_config", [{"env": str(LIMIT)}], indirect=True)
async def test_a_hub_sets_it_through_the_environment(jp_fetch, jp_serverapp, gpu_monitor, kernel_env):
    kernel_id = await start_notebook_kernel(jp_fetch, "mine.ipynb")
    env = await environment_of(jp_serverapp, kernel_id)
    assert env["JUPYTER_GPU_KERNEL_MEMORY_LIMIT_SOURCE"].startswith("JUPYTER_GPU_KERNEL_MEMORY_LIMIT")
    assert "per_process_memory_fraction:" in env["PYTORCH_CUDA_ALLOC_CONF"]


async def test_without_a_quota_the_kernel_environment_is_untouched(
    jp_fetch, jp_serverapp, gpu_monitor, kernel_env
):
    kernel_id = await start_notebook_kernel(jp_fetch, "free.ipynb")
    env = await environment_of(jp_serverapp, kernel_id)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] is None and env["JUPYTER_GPU_KERNEL_MEMORY_LIMIT"] is None
    (kernel,) = (await get(jp_fetch, "kernels"))["kernels"]
    assert kernel["memory_limit_bytes"] is None


def monitor(readings: str, **traits) -> GPUMonitor:
    return GPUMonitor(
        config=Config({"GPUMonitor": {"backend": "simulated", "simulated_readings": readings, **traits}})
    )


def test_a_limit_no_gpu_has_is_a_configuration_error(gpu_monitor_config):
    app = monitor(gpu_monitor_config["simulated_readings"], kernel_memory_limit=200 * GIB)
    with pytest.raises(
        TraitError, match=r"c\.GPUMonitor\.kernel_memory_limit = 214748364800 bytes is more than"
    ):
        app._kernel_environment(app._reader_factory())


def test_a_negative_limit_or_a_malformed_environment_is_named(gpu_monitor_config, monkeypatch):
    with pytest.raises(TraitError, match="kernel_memory_limit"):
        monitor(gpu_monitor_config["simulated_readings"], kernel_memory_limit=-1)
    monkeypatch.setenv("JUPYTER_GPU_KERNEL_MEMORY_LIMIT", "16GiB")
    app = monitor(gpu_monitor_config["simulated_readings"])
    with pytest.raises(
        TraitError, match="JUPYTER_GPU_KERNEL_MEMORY_LIMIT='16GiB' in the server's environment"
    ):
        _ = app.kernel_memory_limit


QUOTA_OOM = (  # torch 2.11's words on an H200 when a per-process fraction caps the allocator
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of "
    "which 120.00 GiB is free. Including non-PyTorch memory, this process has 13.50 GiB memory in "
    "use. 14.00 GiB allowed; Of the allocated memory 12.90 GiB is allocated by PyTorch, and 91.00 MiB "
    "is reserved by PyTorch but unallocated."
)


@pytest.fixture
def shell():
    yield from shell_with(oom.register)


def test_the_out_of_memory_explanation_says_it_is_the_quota_and_who_set_it(shell, nvml, monkeypatch):
    install(monkeypatch, FakeCuda())
    monkeypatch.setenv("JUPYTER_GPU_KERNEL_MEMORY_LIMIT", str(LIMIT))
    monkeypatch.setenv("JUPYTER_GPU_KERNEL_MEMORY_LIMIT_SOURCE", "c.GPUMonitor.kernel_memory_limit")
    with capture_output() as captured:
        shell.run_cell(f"import torch\nraise torch.OutOfMemoryError({QUOTA_OOM!r})")
    assert (
        "That is the quota of this server's kernels: 14.0 GiB each on a GPU, set by "
        "c.GPUMonitor.kernel_memory_limit (14.0 GiB as PyTorch counts it); this kernel uses 13.5 GiB of it."
    ) in captured.stdout
    # without a quota, the same cap is the process's own
    monkeypatch.delenv("JUPYTER_GPU_KERNEL_MEMORY_LIMIT")
    with capture_output() as captured:
        shell.run_cell(f"import torch\nraise torch.OutOfMemoryError({QUOTA_OOM!r})")
    assert "torch.cuda.set_per_process_memory_fraction" in captured.stdout and "quota" not in captured.stdout
