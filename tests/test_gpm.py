"""GPU performance monitoring: what the SMs and tensor cores really did, read beside NVML's
utilisation where the GPU has GPM, and said to be missing where it has not (over the H200
readings replayed by the simulated backend; the gpu tests read a real H200)."""

from __future__ import annotations

import pynvml
import pytest
from support.nvml_reader import opened, replayed
from support.paths import MIG_READINGS

from jupyter_gpu.nvml.fields import GPM_FIELDS
from jupyter_gpu.nvml.gpm import NO_GPM
from jupyter_gpu.nvml.simulated import SimulatedNVML
from jupyter_gpu.server.metrics import gpu_families

MIB = 1024 * 1024
# A busy step as the H200 read it: a bf16 matmul loop (probe of 2026-12-02)
BUSY = {"2": 96.59, "3": 14.27, "5": 93.74, "6": 0.0, "7": 93.74, "9": 0.0, "10": 16.18, "60": 0.0, "61": 0.0}


@pytest.fixture
def nvml() -> SimulatedNVML:
    return replayed()


def test_activity_is_averaged_between_readings_so_the_first_has_none(nvml):
    nvml.readings["devices"][0]["gpm"].update(BUSY)
    reader = opened(nvml)
    first, why = reader.fast(0)
    assert all(first[name] is None for name in GPM_FIELDS) and not set(GPM_FIELDS) & set(why)
    second, why = reader.fast(0)
    assert second["sm_active_percent"] == 96.6 and second["tensor_hmma_active_percent"] == 93.7
    assert second["utilization_gpu_percent"] == 0  # NVML's own figure stays beside it
    assert second["nvlink_rx_bytes_per_second"] == 0 and not set(GPM_FIELDS) & set(why)


def test_pcie_comes_from_gpm_at_no_cost_where_the_gpu_has_it(nvml):
    reader = opened(nvml)
    reader.fast(1)
    values, _ = reader.fast(1)
    assert values["pcie_rx_bytes_per_second"] == nvml.readings["devices"][1]["pcie_rx_kbs"] * 1024
    slow, _ = reader.slow(1)
    assert "pcie_rx_bytes_per_second" not in slow  # NVML's ~21 ms counter is not read
    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0


def test_a_gpu_without_gpm_says_why_and_keeps_nvmls_pcie_counter(nvml):
    del nvml.readings["devices"][0]["gpm"]
    reader = opened(nvml)
    for _ in range(2):
        values, why = reader.fast(0)
    assert all(values[name] is None and why[name] == NO_GPM for name in GPM_FIELDS)
    assert "pcie_rx_bytes_per_second" not in values
    slow, _ = reader.slow(0)
    assert slow["pcie_rx_bytes_per_second"] == 458 * 1024
    assert nvml.calls["nvmlGpmSampleGet"] == 0  # support is asked once, samples never taken


def test_one_metric_nvml_cannot_give_costs_only_that_field(nvml):
    del nvml.readings["devices"][0]["gpm"]["60"]  # no NVLink on this board
    reader = opened(nvml)
    reader.fast(0)
    values, why = reader.fast(0)
    assert values["nvlink_rx_bytes_per_second"] is None and why["nvlink_rx_bytes_per_second"] == (
        "not supported on this GPU"
    )
    assert values["sm_active_percent"] == 0.0 and "sm_active_percent" not in why


def test_a_failing_sample_costs_the_activity_figures_not_the_reading(nvml):
    reader = opened(nvml)
    reader.fast(0)
    nvml.fail("nvmlGpmSampleGet", pynvml.NVML_ERROR_NO_PERMISSION, times=1)
    values, why = reader.fast(0)
    assert values["memory_used_bytes"] is not None
    assert values["sm_active_percent"] is None and why["sm_active_percent"] == "permission denied"
    values, why = reader.fast(0)  # the next reading has its figures again
    assert values["sm_active_percent"] == 0.0 and "sm_active_percent" not in why


def test_samples_are_given_back_to_nvml_when_the_reader_closes(nvml):
    reader = opened(nvml)
    for _ in range(5):
        reader.fast(0), reader.fast(1)
    assert nvml.calls["nvmlGpmSampleAlloc"] == 4  # two per GPU, taken in turns
    reader.close()
    assert nvml.calls["nvmlGpmSampleFree"] == 4


def test_mig_devices_point_to_their_gpu_for_activity():
    nvml = SimulatedNVML.from_file(MIG_READINGS)
    reader = opened(nvml)
    mig_index = len(nvml.readings["devices"])  # the first MIG device, numbered after the GPUs
    values, why = reader.fast(mig_index)
    assert values["sm_active_percent"] is None and why["sm_active_percent"] == "GPU-wide: see GPU 0"


def test_metrics_are_ratios_under_dcgm_exporters_meaning(nvml):
    nvml.readings["devices"][0]["gpm"].update(BUSY)
    reader = opened(nvml)
    reader.fast(0)
    values, why = reader.fast(0)
    gpu = {
        "index": 0,
        "uuid": "GPU-a",
        "mig": None,
        "state": "ok",
        "error": None,
        **values,
        "unsupported": why,
    }
    families = {f.name: f for f in gpu_families([gpu])}
    (sm,) = families["jupyter_gpu_sm_active_ratio"].samples
    assert sm.value == pytest.approx(0.966)
    pipes = {s.labels["pipe"]: s.value for s in families["jupyter_gpu_tensor_pipe_active_ratio"].samples}
    assert pipes == pytest.approx({"hmma": 0.937, "imma": 0.0, "dfma": 0.0})
    (rx,) = families["jupyter_gpu_pcie_rx_bytes_per_second"].samples
    assert rx.value == 458 * 1024
