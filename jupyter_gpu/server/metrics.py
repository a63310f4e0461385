"""Prometheus collector for jupyter_server's own ``/metrics`` endpoint.

It reads the sampler's latest sample and the last kernel attribution at scrape time, so a
scrape costs no NVML call. Units are base units (bytes, watts, celsius, hertz, ratios 0–1).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

GPU_LABELS = ["gpu", "uuid"]

# (metric suffix, sample field, scale to base unit, help)
GPU_GAUGES: tuple[tuple[str, str, float, str], ...] = (
    ("utilization_ratio", "utilization_gpu_percent", 0.01, "Fraction of time a kernel ran on the GPU (0-1)."),
    (
        "memory_utilization_ratio",
        "utilization_memory_percent",
        0.01,
        "Fraction of time device memory was read or written (0-1).",
    ),
    ("memory_used_bytes", "memory_used_bytes", 1, "Device memory used by processes (NVML memory info v2)."),
    ("memory_reserved_bytes", "memory_reserved_bytes", 1, "Device memory reserved by the driver."),
    ("memory_free_bytes", "memory_free_bytes", 1, "Free device memory."),
    ("memory_total_bytes", "memory_total_bytes", 1, "Total device memory."),
    ("temperature_celsius", "temperature_celsius", 1, "GPU core temperature."),
    ("power_watts", "power_watts", 1, "Power draw."),
    ("power_limit_watts", "power_limit_watts", 1, "Enforced power limit."),
    ("sm_clock_hertz", "clock_sm_mhz", 1e6, "SM clock."),
    ("memory_clock_hertz", "clock_mem_mhz", 1e6, "Memory clock."),
    ("pcie_rx_bytes_per_second", "pcie_rx_bytes_per_second", 1, "PCIe receive throughput."),
    ("pcie_tx_bytes_per_second", "pcie_tx_bytes_per_second", 1, "PCIe transmit throughput."),
)


class GPUCollector(Collector):
    """Registered once per process; reports for whichever monitor is running (or nothing)."""

    def __init__(self) -> None:
        self.monitor: Any = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        monitor = self.monitor
        if monitor is None:
            return
        status = monitor.sampler.status
        available = GaugeMetricFamily("jupyter_gpu_available", "1 when NVML works and sees at least one GPU.")
        available.add_metric([], 1.0 if status.available else 0.0)
        yield available
        latest = monitor.sampler.latest()
        if not status.available or latest is None:
            return
        yield from self._gpu_metrics(latest.gpus)
        if monitor.kernels.last:
            yield from self._kernel_metrics(monitor.kernels.last)

    def _gpu_metrics(self, gpus: tuple[dict[str, Any], ...]) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "jupyter_gpu_up", "1 when the GPU answers, 0 when it is lost.", labels=GPU_LABELS
        )
        for gpu in gpus:
            up.add_metric([str(gpu["index"]), gpu.get("uuid") or ""], 1.0 if gpu["state"] == "ok" else 0.0)
        yield up
        for suffix, field, scale, doc in GPU_GAUGES:
            family = GaugeMetricFamily(f"jupyter_gpu_{suffix}", doc, labels=GPU_LABELS)
            for gpu in gpus:
                value = gpu.get(field)
                if value is not None:
                    family.add_metric([str(gpu["index"]), gpu.get("uuid") or ""], value * scale)
            yield family

    def _kernel_metrics(self, view: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
        kernel = GaugeMetricFamily(
            "jupyter_gpu_kernel_memory_used_bytes",
            "Device memory held by a kernel's process tree.",
            labels=[*GPU_LABELS, "kernel_id", "notebook_path"],
        )
        for k in view["kernels"]:
            for row in k["gpu_memory"]:
                kernel.add_metric(
                    [str(row["gpu_index"]), row.get("uuid") or "", k["id"], k.get("path") or ""],
                    row["used_memory_bytes"],
                )
        yield kernel
        yield from self._allocator_metrics(view["kernels"])
        other = GaugeMetricFamily(
            "jupyter_gpu_unattributed_memory_used_bytes",
            "Device memory held by processes that are not kernels of this server.",
            labels=GPU_LABELS,
        )
        totals: dict[tuple[str, str], int] = {}
        for row in view["unattributed"]:
            key = (str(row["gpu_index"]), row.get("uuid") or "")
            totals[key] = totals.get(key, 0) + (row["used_memory_bytes"] or 0)
        for key, total in totals.items():
            other.add_metric(list(key), total)
        yield other

    def _allocator_metrics(self, kernels: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
        labels = [*GPU_LABELS, "kernel_id", "notebook_path"]
        families = {
            field: GaugeMetricFamily(f"jupyter_gpu_kernel_allocator_{name}", doc, labels=labels)
            for field, name, doc in ALLOCATOR_GAUGES
        }
        for k in kernels:
            for device in (k.get("allocator") or {}).get("devices", []):
                label_values = [str(device["index"]), device.get("uuid") or "", k["id"], k.get("path") or ""]
                for field, family in families.items():
                    if device.get(field) is not None:
                        family.add_metric(label_values, device[field])
        yield from families.values()


# (stats file field, metric name, help) for PyTorch's caching allocator in each kernel
ALLOCATOR_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("allocated_bytes", "allocated_bytes", "Memory in live tensors."),
    ("reserved_bytes", "reserved_bytes", "Memory the caching allocator holds from the driver."),
    (
        "inactive_split_bytes",
        "inactive_split_bytes",
        "Free memory trapped in segments that hold live blocks.",
    ),
    (
        "fragmentation",
        "fragmentation_ratio",
        "inactive_split / reserved (0-1): memory empty_cache() cannot return.",
    ),
    ("num_alloc_retries", "alloc_retries", "Allocations that had to free the cache and retry."),
    ("num_ooms", "ooms", "Out-of-memory errors raised by the allocator."),
)

COLLECTOR = GPUCollector()
_registered = False


def attach(monitor: Any) -> None:
    global _registered
    if not _registered:
        REGISTRY.register(COLLECTOR)
        _registered = True
    COLLECTOR.monitor = monitor


def detach(monitor: Any) -> None:
    if COLLECTOR.monitor is monitor:
        COLLECTOR.monitor = None
