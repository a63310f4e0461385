"""The one NVML reader: versioned calls probed once, errors explained by the one table, and the
doctor reading through it (over the H200 readings replayed by the simulated backend)."""

from __future__ import annotations

import pynvml
import pytest
from support.nvml_reader import opened, replayed

from jupyter_gpu.doctor.nvmlinfo import read_nvml
from jupyter_gpu.nvml import NvmlReader, NvmlUnavailable
from jupyter_gpu.nvml.reasons import PROBLEMS
from jupyter_gpu.nvml.simulated import SimulatedNVML


@pytest.fixture
def nvml() -> SimulatedNVML:
    return replayed()


def test_an_old_drivers_memory_info_v1_is_found_once_and_remembered(nvml):
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    reader = opened(nvml)
    for _ in range(3):
        values, unsupported = reader.fast(0)
        assert values["memory_used_bytes"] == nvml.readings["devices"][0]["memory"]["used"]
        assert values["memory_reserved_bytes"] is None
        assert unsupported["memory_reserved_bytes"] == "needs memory info v2 (driver 510 or newer)"
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert reader.is_open  # a missing newer version is no reason to give NVML up


def test_a_field_a_gpu_does_not_support_is_asked_once_per_session(nvml):
    """An H200 answers fan speed "not supported", slowly (0.1-0.4 ms): most of the fast read."""
    nvml.fail("nvmlDeviceGetFanSpeed", pynvml.NVML_ERROR_NOT_SUPPORTED, device=0)
    nvml.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN, device=0)  # not an answer for good
    reader = opened(nvml)
    for _ in range(3):
        values, unsupported = reader.fast(0)
        assert values["fan_speed_percent"] is None
        assert unsupported["fan_speed_percent"] == "not supported on this GPU"
        assert values["temperature_celsius"] is None
    assert nvml.calls["nvmlDeviceGetFanSpeed"] == 1
    assert nvml.calls["nvmlDeviceGetTemperature"] == 3
    reader.forget(0)  # a GPU that was lost and found again is asked afresh
    reader.fast(0)
    assert nvml.calls["nvmlDeviceGetFanSpeed"] == 2


def test_process_list_v2_when_v3_is_missing(nvml):
    nvml.fail("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    reader = opened(nvml)
    for _ in range(3):
        values, _ = reader.fast(0)
        assert [p["pid"] for p in values["processes"]] == [
            p["pid"] for p in nvml.readings["devices"][0]["compute_processes"]
        ]
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == 1  # the probe
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 3


def test_other_errors_of_the_newest_version_are_not_taken_for_a_missing_version(nvml):
    nvml.fail("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_UNKNOWN, times=1)
    reader = opened(nvml)
    values, unsupported = reader.fast(0)
    assert values["memory_used_bytes"] is None and unsupported["memory_used_bytes"].startswith("read failed")
    values, unsupported = reader.fast(0)
    assert values["memory_reserved_bytes"] is not None and "memory_reserved_bytes" not in unsupported


def test_unavailable_nvml_carries_the_tables_problem(nvml):
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NvmlUnavailable) as caught:
        NvmlReader(nvml).open()
    assert caught.value.problem is PROBLEMS["driver_not_loaded"]
    assert caught.value.reason == (
        "The NVIDIA driver is installed but not loaded. Load it (`sudo modprobe nvidia`) or reboot "
        "after installing or updating the driver; `nvidia-smi` must then list the GPUs."
    )


def test_readers_say_whether_their_readings_are_simulated(nvml):
    assert NvmlReader(nvml).simulated and not NvmlReader(pynvml).simulated


def test_the_doctor_reads_nvml_through_the_reader(nvml):
    nvml.readings["devices"][1]["cuda_capability"] = [9, 0]
    info = read_nvml(nvml)
    assert info.error_kind is None
    assert (info.driver_version, info.cuda_driver_version) == ("580.159.04", (13, 0))
    assert [(d.name, d.uuid, d.capability, d.mig_current, d.ecc_uncorrected) for d in info.devices] == [
        ("NVIDIA H200", nvml.readings["devices"][0]["uuid"], None, False, 0),
        ("NVIDIA H200", nvml.readings["devices"][1]["uuid"], (9, 0), False, 0),
    ]
    assert nvml.calls["nvmlInit"] == 1 and not NvmlReader(nvml).is_open


def test_the_doctor_keeps_the_kind_of_failure(nvml):
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_NO_PERMISSION)
    info = read_nvml(nvml)
    assert info.error_kind == "no_permission" and info.error == str(
        pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
    )
