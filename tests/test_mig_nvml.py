"""MIG devices read through the one NVML reader, over the simulated backend answering as NVML's
MIG handles do (tests/fixtures/nvml_readings_mig.json): how they are found, what a kernel given
one MIG slice sees in ``%gpu_mem``, and ``jupyter gpu status`` without a server."""

from __future__ import annotations

import inspect
import json
import os

import pynvml
import pytest
from IPython.utils.capture import capture_output
from support.fake_torch import FakeCuda, install
from support.ipython_shell import shell_with
from support.paths import MIG_READINGS

from jupyter_gpu.kernel import gpu_memory, memory_magic
from jupyter_gpu.nvml import NvmlReader
from jupyter_gpu.nvml.simulated import SimulatedNVML

GIB = 1024**3
MIG_CALLS = (
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
)


@pytest.fixture
def nvml() -> SimulatedNVML:
    return SimulatedNVML(json.loads(MIG_READINGS.read_text()))


def _devices(nvml: SimulatedNVML) -> list[tuple[int, str | None]]:
    reader = NvmlReader(nvml)
    reader.open()
    return [(info["index"], info["mig"] and info["mig"]["profile"]) for info, _ in reader.devices()]


@pytest.mark.parametrize("name", MIG_CALLS)
def test_the_simulated_mig_calls_are_pynvmls(name):
    """The simulated backend takes what the installed pynvml takes, so the reader calls real NVML alike."""
    real = list(inspect.signature(getattr(pynvml, name)).parameters)
    assert len(inspect.signature(getattr(SimulatedNVML, name)).parameters) == len(real) + 1  # self


def test_a_mig_handle_answers_not_supported_for_the_whole_gpus_readings(nvml):
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(nvml.nvmlDeviceGetHandleByIndex(0), 0)
    assert nvml.nvmlDeviceGetUUID(handle).startswith("MIG-")
    for call in (
        lambda: nvml.nvmlDeviceGetPowerUsage(handle),
        lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
    ):
        with pytest.raises(pynvml.NVMLError) as caught:
            call()
        assert caught.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_an_empty_mig_slot_is_skipped(nvml):
    """Destroying an instance leaves a gap NVML answers with NVML_ERROR_NOT_FOUND."""
    nvml.readings["devices"][0]["mig_devices"][2]["slot"] = 5
    assert _devices(nvml) == [(0, None), (2, "3g.71gb"), (3, "2g.35gb"), (4, "1g.18gb"), (1, None)]


def test_a_gpu_whose_mig_devices_cannot_be_listed_keeps_its_processes(nvml):
    nvml.fail("nvmlDeviceGetMaxMigDeviceCount", pynvml.NVML_ERROR_NO_PERMISSION)
    reader = NvmlReader(nvml)
    reader.open()
    (gpu0, why), _ = reader.devices()
    assert why["mig_devices"] == "MIG devices cannot be listed: permission denied"
    values, _ = reader.fast(0)
    assert [p["pid"] for p in values["processes"]] == [564]


def test_mig_mode_off_changes_nothing(nvml):
    """A GPU with MIG devices on record but MIG mode off (as after a reset) is one whole GPU."""
    nvml.readings["devices"][0]["mig_mode"] = [0, 0]
    assert _devices(nvml) == [(0, None), (1, None)]
    reader = NvmlReader(nvml)
    reader.open()
    list(reader.devices())
    values, _ = reader.fast(0)
    assert values["processes"] == [{"pid": 564, "used_memory_bytes": 12 * GIB + 532 * 1024**2}]


@pytest.fixture
def ip():
    yield from shell_with(memory_magic.register)


@pytest.mark.parametrize("spelling", ["GPU-", "MIG-"])
def test_gpu_mem_of_a_kernel_given_one_mig_slice_shows_that_slice(ip, nvml, monkeypatch, spelling):
    """PyTorch in a container given the 1g.18gb slice has one CUDA device, whose UUID is the
    slice's (written as jupyter_gpu writes a GPU's, ``GPU-``, or as NVML does, ``MIG-``)."""
    small = nvml.readings["devices"][0]["mig_devices"][2]
    small["compute_processes"].append({"pid": os.getpid(), "used_gpu_memory": 3_212_836_864})
    small["memory_v2"]["used"] = 3_212_836_864
    monkeypatch.setattr(gpu_memory, "nvml_backend", lambda: nvml)
    cuda = FakeCuda()
    cuda.uuids[0] = small["uuid"].removeprefix("MIG-")
    install(monkeypatch, cuda)
    monkeypatch.setattr(memory_magic, "nvml_uuid", lambda torch, index: spelling + cuda.uuids[index])
    with capture_output() as captured:
        ip.run_line_magic("gpu_mem", "")
    text = captured.outputs[0].data["text/plain"]
    assert f"GPU 0: NVIDIA H200 MIG 1g.18gb ({spelling}{cuda.uuids[0]})" in text
    assert "whole MIG device  2.99 GiB  used of 16.8 GiB" in text  # the slice's, not the GPU's 140 GiB
    assert "2.99 GiB  2.49 GiB PyTorch cache + 518 MiB outside it" in text
    assert "564" not in text  # the process on another slice is not on this one


def test_status_without_a_server_lists_mig_devices_under_their_gpu(nvml, monkeypatch):
    import jupyter_gpu.nvml
    from jupyter_gpu.cli.status import from_nvml, render

    monkeypatch.setattr(jupyter_gpu.nvml, "NvmlReader", lambda: NvmlReader(nvml))
    status = from_nvml()
    assert [(g["index"], g["mig"] and g["mig"]["gpu_instance_id"]) for g in status["gpus"]] == [
        (0, None),
        (2, 2),
        (3, 3),
        (4, 9),
        (1, None),
    ]
    assert [(p["gpu_index"], p["pid"]) for p in status["processes"]] == [(2, 564)]  # once, on its slice
    lines = render(status).splitlines()
    assert lines[3].split()[:3] == ["0", "NVIDIA", "H200"] and "38 C" in lines[3]
    assert lines[4].split()[:4] == ["2", "└", "MIG", "3g.71gb"] and lines[4].endswith("12.5 / 66.3 GiB (19%)")
