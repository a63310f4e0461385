"""The per-GPU metric families of ``/metrics``: which sample field becomes which series, in base
units (ratios 0-1, bytes, watts, hertz). A field a GPU cannot read is absent, never zero."""

from __future__ import annotations

from typing import NamedTuple


class Family(NamedTuple):
    """One metric family of per-GPU fields; ``fields`` pairs a value of ``label`` with a field."""

    counter: bool
    name: str
    doc: str
    fields: tuple[tuple[str, str], ...]
    label: str | None = None
    scale: float = 1.0


def _gauge(name: str, field: str, doc: str, scale: float = 1.0) -> Family:
    return Family(False, name, doc, (("", field),), scale=scale)


GPU_FAMILIES: tuple[Family, ...] = (
    _gauge(
        "utilization_ratio",
        "utilization_gpu_percent",
        "Fraction of time a kernel ran on the GPU (0-1).",
        0.01,
    ),
    _gauge(
        "memory_utilization_ratio",
        "utilization_memory_percent",
        "Fraction of time device memory was read or written (0-1).",
        0.01,
    ),
    _gauge(
        "memory_used_bytes", "memory_used_bytes", "Device memory used by processes (NVML memory info v2)."
    ),
    _gauge("memory_reserved_bytes", "memory_reserved_bytes", "Device memory reserved by the driver."),
    _gauge("memory_free_bytes", "memory_free_bytes", "Free device memory."),
    _gauge("memory_total_bytes", "memory_total_bytes", "Total device memory."),
    _gauge("temperature_celsius", "temperature_celsius", "GPU core temperature."),
    _gauge("memory_temperature_celsius", "memory_temperature_celsius", "Device memory (HBM) temperature."),
    _gauge("power_watts", "power_watts", "Power draw."),
    _gauge("power_limit_watts", "power_limit_watts", "Enforced power limit."),
    _gauge("sm_clock_hertz", "clock_sm_mhz", "SM clock.", 1e6),
    _gauge("memory_clock_hertz", "clock_mem_mhz", "Memory clock.", 1e6),
    _gauge(
        "sm_active_ratio",
        "sm_active_percent",
        "Share of SMs busy, over time (0-1; GPM, Hopper on): what utilization_ratio is mistaken for.",
        0.01,
    ),
    _gauge(
        "sm_occupancy_ratio",
        "sm_occupancy_percent",
        "Resident warps against the SMs' maximum (0-1; GPM).",
        0.01,
    ),
    _gauge(
        "tensor_active_ratio",
        "tensor_active_percent",
        "Share of time tensor cores ran, any precision (0-1; GPM).",
        0.01,
    ),
    Family(
        False,
        "tensor_pipe_active_ratio",
        "Share of time tensor cores ran, per pipe (0-1; GPM): hmma fp16/bf16/tf32, imma int8, dfma fp64.",
        (
            ("hmma", "tensor_hmma_active_percent"),
            ("imma", "tensor_imma_active_percent"),
            ("dfma", "tensor_dfma_active_percent"),
        ),
        label="pipe",
        scale=0.01,
    ),
    _gauge(
        "dram_active_ratio",
        "dram_active_percent",
        "Device memory bandwidth used against its maximum (0-1; GPM).",
        0.01,
    ),
    _gauge("nvlink_rx_bytes_per_second", "nvlink_rx_bytes_per_second", "Received over all NVLinks (GPM)."),
    _gauge("nvlink_tx_bytes_per_second", "nvlink_tx_bytes_per_second", "Sent over all NVLinks (GPM)."),
    _gauge("pcie_rx_bytes_per_second", "pcie_rx_bytes_per_second", "PCIe receive throughput."),
    _gauge("pcie_tx_bytes_per_second", "pcie_tx_bytes_per_second", "PCIe transmit throughput."),
    _gauge(
        "retired_pages_pending",
        "retired_pages_pending",
        "1 when a page waits for retirement at driver reload.",
    ),
    _gauge("row_remap_pending", "remapped_rows_pending", "1 when a row remapping waits for a GPU reset."),
    _gauge(
        "row_remap_failed", "remapped_rows_failed", "1 when a row remapping failed: the GPU needs service."
    ),
    Family(True, "energy_joules", "Energy used since the driver loaded.", (("", "energy_joules"),)),
    Family(
        True,
        "ecc_errors",
        "ECC errors since the driver loaded (corrected: single-bit; uncorrected: double-bit).",
        (("corrected", "ecc_corrected_volatile"), ("uncorrected", "ecc_uncorrected_volatile")),
        label="error_type",
    ),
    Family(
        True,
        "ecc_lifetime_errors",
        "ECC errors over the GPU's life (NVML's aggregate counts, kept across driver reloads).",
        (("corrected", "ecc_corrected_aggregate"), ("uncorrected", "ecc_uncorrected_aggregate")),
        label="error_type",
    ),
    Family(
        True,
        "retired_pages",
        "Device memory pages retired after ECC errors (GPUs before Ampere).",
        (("single_bit_ecc", "retired_pages_single_bit"), ("double_bit_ecc", "retired_pages_double_bit")),
        label="cause",
    ),
    Family(
        True,
        "remapped_rows",
        "Device memory rows remapped after ECC errors (Ampere and later).",
        (("correctable", "remapped_rows_correctable"), ("uncorrectable", "remapped_rows_uncorrectable")),
        label="cause",
    ),
)
