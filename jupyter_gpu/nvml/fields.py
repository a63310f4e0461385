"""The NVML fields the reader reads, by our names, and how NVML's raw values become ours.

Kept apart from the reader so that the server's metrics and sampler name the same fields (clock
reasons, memory errors, the slow cadence's fields) without reading anything.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pynvml

# NVML's clocks event reasons (called throttle reasons before driver 535): bit, name.
CLOCK_THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (pynvml.nvmlClocksEventReasonGpuIdle, "gpu_idle"),
    (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"),
    (pynvml.nvmlClocksEventReasonSwPowerCap, "sw_power_cap"),
    (pynvml.nvmlClocksEventReasonHwSlowdown, "hw_slowdown"),
    (pynvml.nvmlClocksEventReasonSyncBoost, "sync_boost"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "hw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"),
    (pynvml.nvmlClocksEventReasonDisplayClockSetting, "display_clock_setting"),
)
# ECC error counts, retired pages (before Ampere) and remapped rows (Ampere on): name, NVML field.
MEMORY_ERROR_FIELDS: tuple[tuple[str, int], ...] = (
    ("ecc_corrected_volatile", pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL),
    ("ecc_uncorrected_volatile", pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL),
    ("ecc_corrected_aggregate", pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL),
    ("ecc_uncorrected_aggregate", pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL),
    ("retired_pages_single_bit", pynvml.NVML_FI_DEV_RETIRED_SBE),
    ("retired_pages_double_bit", pynvml.NVML_FI_DEV_RETIRED_DBE),
    ("retired_pages_pending", pynvml.NVML_FI_DEV_RETIRED_PENDING),
    ("remapped_rows_correctable", pynvml.NVML_FI_DEV_REMAPPED_COR),
    ("remapped_rows_uncorrectable", pynvml.NVML_FI_DEV_REMAPPED_UNC),
    ("remapped_rows_pending", pynvml.NVML_FI_DEV_REMAPPED_PENDING),
    ("remapped_rows_failed", pynvml.NVML_FI_DEV_REMAPPED_FAILURE),
)
# Read in one nvmlDeviceGetFieldValues call (a few ms) on the slow cadence. Memory temperature
# has no getter of its own.
FIELD_VALUES = (("memory_temperature_celsius", pynvml.NVML_FI_DEV_MEMORY_TEMP), *MEMORY_ERROR_FIELDS)
_FLAG_FIELDS = frozenset({"retired_pages_pending", "remapped_rows_pending", "remapped_rows_failed"})
PCIE_FIELDS = ("pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second")
# What ``slow`` reads; null in a sample until its first reading. The energy counter is there
# because one read of it costs 2.4 ms on an H200 (driver 580; benchmarks/nvml_calls.py), 90% of
# what the fast read cost with it; a counter loses nothing by being read less often.
SLOW_FIELDS = (*PCIE_FIELDS, "energy_joules", *(name for name, _ in FIELD_VALUES))
MIB = 1024 * 1024


class GpmMetric(NamedTuple):
    name: str  # the API's field
    metric_id: int  # NVML_GPM_METRIC_* (numbered by NVML; older pynvml lacks the constants)
    scale: float  # NVML's unit -> ours (percent stays percent; MiB/s -> bytes/s)


# GPU performance monitoring's metrics (``gpm``). Hopper's tensor pipes as NVML splits them: HMMA
# runs fp16, bf16 and tf32 (on the H200 a tf32 matmul reads as a bf16 one does), IMMA int8, DFMA fp64.
GPM_METRICS: tuple[GpmMetric, ...] = (
    GpmMetric("sm_active_percent", 2, 1.0),  # SM_UTIL: the share of SMs busy, averaged over time
    GpmMetric("sm_occupancy_percent", 3, 1.0),  # resident warps against the SMs' maximum
    GpmMetric("tensor_active_percent", 5, 1.0),  # ANY_TENSOR_UTIL
    GpmMetric("tensor_hmma_active_percent", 7, 1.0),
    GpmMetric("tensor_imma_active_percent", 9, 1.0),
    GpmMetric("tensor_dfma_active_percent", 6, 1.0),
    GpmMetric("dram_active_percent", 10, 1.0),  # DRAM bandwidth used against its maximum
    GpmMetric("nvlink_rx_bytes_per_second", 60, MIB),  # NVLINK_TOTAL_RX_PER_SEC, all links
    GpmMetric("nvlink_tx_bytes_per_second", 61, MIB),
    GpmMetric(PCIE_FIELDS[0], 21, MIB),  # averaged over the interval, where NVML's counter
    GpmMetric(PCIE_FIELDS[1], 20, MIB),  # samples ~20 ms of it
)
# The fields GPM alone gives (PCIe falls back to NVML's counter without it).
GPM_FIELDS: tuple[str, ...] = tuple(m.name for m in GPM_METRICS if m.name not in PCIE_FIELDS)
GPM_INTEGER = frozenset({"nvlink_rx_bytes_per_second", "nvlink_tx_bytes_per_second", *PCIE_FIELDS})
# The union member of NVML's field value that each value type fills.
_VALUE_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def field_value(name: str, answer: Any) -> Any:
    """The value of one successful ``nvmlFieldValue_t``; ValueError for a value type this code
    does not know (a newer NVML's)."""
    if answer.valueType not in _VALUE_MEMBERS:
        raise ValueError(f"unknown NVML value type {answer.valueType}")
    value = getattr(answer.value, _VALUE_MEMBERS[answer.valueType])
    return bool(value) if name in _FLAG_FIELDS else value


def as_text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def cuda_version_text(version: int) -> str:
    """NVML encodes CUDA 13.0 as 13000."""
    return f"{version // 1000}.{version % 1000 // 10}"


def milli(value: int) -> float:
    """NVML's milliwatts and millijoules in watts and joules."""
    return value / 1000.0


def clock_reasons(mask: int) -> list[str]:
    """The active clocks event reasons, by name, in NVML's bit order."""
    return [name for bit, name in CLOCK_THROTTLE_REASONS if mask & bit]
