"""Prometheus collector for jupyter_server's own ``/metrics`` endpoint.

It reads the sampler's latest sample and the last kernel attribution at scrape time, so a
scrape costs no NVML call. Units are base units (bytes, watts, joules, celsius, hertz, ratios
0–1), cumulative counts are counters named ``_total``, and a field a GPU cannot read is absent,
never zero. ``jupyter_gpu/monitoring/`` holds recording rules to DCGM's names and units and a
Grafana dashboard over these series.

Devices carry dcgm-exporter's labels: ``gpu`` (NVML's index) and ``uuid``; a MIG device (whose
series are its memory and processes') also ``GPU_I_ID`` and ``GPU_I_PROFILE``, ``gpu`` its GPU's.

Per-kernel series carry the labels ``c.GPUMonitor.metrics_kernel_labels`` keeps; kernels that
share those labels are summed into one series, so no two series ever have the same labels
(Prometheus drops a whole scrape with a duplicate). Under JupyterHub every series also carries
``user``, the Hub's ``$JUPYTERHUB_USER`` for this server, so a fleet dashboard can group by student.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from ..nvml.fields import CLOCK_THROTTLE_REASONS
from ..nvml.mig import bare_uuid
from .metric_families import GPU_FAMILIES

MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")
GPU_LABELS = ["gpu", "uuid", *MIG_LABELS]
GpuKey = tuple[str, str, str, str]  # the values of GPU_LABELS
# c.GPUMonitor.metrics_kernel_labels -> the kernel labels per-kernel series carry
KERNEL_LABELS: dict[str, tuple[str, ...]] = {
    "both": ("kernel_id", "notebook_path"),
    "kernel": ("kernel_id",),
    "notebook": ("notebook_path",),
    "none": (),
}


# (stats file field, metric name, help, counter) for PyTorch's caching allocator in each kernel
ALLOCATOR_SERIES: tuple[tuple[str, str, str, bool], ...] = (
    ("allocated_bytes", "allocated_bytes", "Memory in live tensors.", False),
    ("reserved_bytes", "reserved_bytes", "Memory the caching allocator holds from the driver.", False),
    (
        "inactive_split_bytes",
        "inactive_split_bytes",
        "Free memory trapped in segments that hold live blocks.",
        False,
    ),
    (
        "fragmentation",
        "fragmentation_ratio",
        "inactive_split / reserved (0-1): memory empty_cache() cannot return.",
        False,
    ),
    ("num_alloc_retries", "alloc_retries", "Allocations that had to free the cache and retry.", True),
    ("num_ooms", "ooms", "Out-of-memory errors raised by the allocator.", True),
)


def _family(
    counter: bool, name: str, doc: str, labels: Sequence[str]
) -> GaugeMetricFamily | CounterMetricFamily:
    kind = CounterMetricFamily if counter else GaugeMetricFamily
    return kind(f"jupyter_gpu_{name}", doc, labels=list(labels))


def gpu_key(device: Mapping[str, Any]) -> GpuKey:
    """The GPU_LABELS of a device of the devices reply or of a sample, as dcgm-exporter has them."""
    uuid, mig = device.get("uuid") or "", device.get("mig")
    if mig is None:
        return (str(device["index"]), uuid, "", "")
    instance = mig["gpu_instance_id"]
    return (str(mig["parent_index"]), uuid, "" if instance is None else str(instance), mig["profile"] or "")


class GpuKeys:
    """The GPU_LABELS of each device the sampler knows: by the index the replies give it, and by
    its UUID as a kernel's allocator spells it (``mig.bare_uuid``). Others keep their number."""

    def __init__(self, devices: Iterable[Mapping[str, Any]]) -> None:
        self._by_index = {d["index"]: gpu_key(d) for d in devices}
        self._by_uuid = {bare_uuid(key[1]): key for key in self._by_index.values() if key[1]}

    def of(self, index: Any, uuid: str | None) -> GpuKey:
        known = self._by_uuid.get(bare_uuid(uuid)) if uuid else self._by_index.get(index)
        return known or (str(index), uuid or "", "", "")


def gpu_families(gpus: Iterable[dict[str, Any]]) -> Iterator[Metric]:
    """Every per-GPU family, from one sample's GPUs; a field that is null is left out."""
    gpus = list(gpus)
    up = GaugeMetricFamily("jupyter_gpu_up", "1 when the GPU answers, 0 when it is lost.", labels=GPU_LABELS)
    for gpu in gpus:
        up.add_metric(gpu_key(gpu), 1.0 if gpu["state"] == "ok" else 0.0)
    yield up
    for spec in GPU_FAMILIES:
        family = _family(spec.counter, spec.name, spec.doc, GPU_LABELS + ([spec.label] if spec.label else []))
        for gpu in gpus:
            for label_value, field in spec.fields:
                value = gpu.get(field)
                if value is not None:
                    extra = [label_value] if spec.label else []
                    family.add_metric([*gpu_key(gpu), *extra], value * spec.scale)
        yield family
    throttle = GaugeMetricFamily(
        "jupyter_gpu_clock_throttle_active",
        "1 while this reason holds the clocks below their maximum (NVML's clocks event reasons).",
        labels=[*GPU_LABELS, "reason"],
    )
    for gpu in gpus:
        active = gpu.get("clock_throttle_reasons")
        if active is not None:
            for _, reason in CLOCK_THROTTLE_REASONS:
                throttle.add_metric([*gpu_key(gpu), reason], float(reason in active))
    yield throttle


def info_family(system: dict[str, Any], devices: Iterable[dict[str, Any]]) -> InfoMetricFamily:
    """``jupyter_gpu_gpu_info``: what does not change while the server runs, as labels of a 1."""
    info = InfoMetricFamily("jupyter_gpu_gpu", "Identity of each GPU and its driver.", labels=GPU_LABELS)
    versions = {key: system.get(key) or "" for key in ("driver_version", "cuda_driver_version")}
    for device in devices:
        details = {"name": device.get("name") or "", "pci_bus_id": device.get("pci_bus_id") or "", **versions}
        if device.get("mig") is not None:  # dcgm-exporter's UUID of a MIG device is its GPU's
            details["parent_uuid"] = device["mig"]["parent_uuid"] or ""
        info.add_metric(gpu_key(device), details)
    return info


def xid_family(counts: dict[tuple[int, int], int], keys: GpuKeys) -> Metric:
    """``jupyter_gpu_xid_errors_total``: the critical errors (Xids) each GPU reported since the
    server started, by Xid number (DCGM's XID_ERRORS gauge keeps only the last one)."""
    family = CounterMetricFamily(
        "jupyter_gpu_xid_errors",
        "Critical GPU errors (Xids) NVML reported since the server started, by Xid.",
        labels=[*GPU_LABELS, "xid"],
    )
    for (gpu, xid), count in sorted(counts.items()):
        family.add_metric([*keys.of(gpu, None), str(xid)], count)
    return family


def _kernel_key(kernel: dict[str, Any], gpu: GpuKey, keep: tuple[str, ...]) -> tuple[str, ...]:
    values = {"kernel_id": kernel["id"], "notebook_path": kernel.get("path") or ""}
    return (*gpu, *(values[name] for name in keep))


def kernel_memory(
    kernels: Iterable[dict[str, Any]], keep: tuple[str, ...], keys: GpuKeys
) -> dict[tuple[str, ...], float]:
    """GPU memory held by kernels' process trees, summed over kernels that share the kept labels."""
    totals: dict[tuple[str, ...], float] = {}
    for kernel in kernels:
        for row in kernel["gpu_memory"]:
            key = _kernel_key(kernel, keys.of(row["gpu_index"], row.get("uuid")), keep)
            totals[key] = totals.get(key, 0) + row["used_memory_bytes"]
    return totals


def kernel_idle(
    kernels: Iterable[dict[str, Any]], keep: tuple[str, ...], keys: GpuKeys
) -> dict[tuple[str, ...], float]:
    """Seconds idle of each idle kernel, per GPU it holds memory on; kernels that share the kept
    labels report the longest (a sum of idle times would mean nothing)."""
    longest: dict[tuple[str, ...], float] = {}
    for kernel in kernels:
        idle = kernel.get("idle_seconds")
        if idle is None:
            continue
        for row in kernel["gpu_memory"]:
            key = _kernel_key(kernel, keys.of(row["gpu_index"], row.get("uuid")), keep)
            longest[key] = max(longest.get(key, 0.0), idle)
    return longest


def kernel_allocators(
    kernels: Iterable[dict[str, Any]], keep: tuple[str, ...], keys: GpuKeys
) -> dict[tuple[str, ...], dict[str, float]]:
    """Allocator figures per device and kept labels. Bytes and counts of kernels that share the
    labels are summed; their fragmentation is weighted by reserved bytes (which, for figures
    from memory_stats, is inactive_split / reserved of the sums)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for kernel in kernels:
        for device in (kernel.get("allocator") or {}).get("devices", []):
            key = _kernel_key(kernel, keys.of(device["index"], device.get("uuid")), keep)
            groups.setdefault(key, []).append(device)
    result: dict[tuple[str, ...], dict[str, float]] = {}
    for key, devices in groups.items():
        figures: dict[str, float] = {}
        for field, _, _, _ in ALLOCATOR_SERIES:
            present = [d for d in devices if d.get(field) is not None]
            if not present:
                continue
            if field != "fragmentation":
                figures[field] = sum(d[field] for d in present)
            elif len(present) == 1:
                figures[field] = present[0][field]
            else:
                weight = sum(d.get("reserved_bytes") or 0 for d in present)
                trapped = sum(d[field] * (d.get("reserved_bytes") or 0) for d in present)
                figures[field] = trapped / weight if weight else 0.0
        result[key] = figures
    return result


def kernel_families(view: dict[str, Any], mode: str, keys: GpuKeys) -> Iterator[Metric]:
    keep = KERNEL_LABELS[mode]
    labels = [*GPU_LABELS, *keep]
    memory = GaugeMetricFamily(
        "jupyter_gpu_kernel_memory_used_bytes",
        "Device memory held by a kernel's process tree.",
        labels=labels,
    )
    for key, total in kernel_memory(view["kernels"], keep, keys).items():
        memory.add_metric(key, total)
    yield memory
    idle = GaugeMetricFamily(
        "jupyter_gpu_kernel_idle_seconds",
        "Seconds since the kernel manager last saw activity on an idle kernel holding device memory.",
        labels=labels,
    )
    for key, seconds in kernel_idle(view["kernels"], keep, keys).items():
        idle.add_metric(key, seconds)
    yield idle
    allocators = kernel_allocators(view["kernels"], keep, keys)
    for field, name, doc, counter in ALLOCATOR_SERIES:
        family = _family(counter, f"kernel_allocator_{name}", doc, labels)
        for key, figures in allocators.items():
            if field in figures:
                family.add_metric(key, figures[field])
        yield family
    other = GaugeMetricFamily(
        "jupyter_gpu_unattributed_memory_used_bytes",
        "Device memory held by processes that are not kernels of this server.",
        labels=GPU_LABELS,
    )
    totals: dict[GpuKey, int] = {}
    for row in view["unattributed"]:
        key = keys.of(row["gpu_index"], row.get("uuid"))
        totals[key] = totals.get(key, 0) + (row["used_memory_bytes"] or 0)
    for key, total in totals.items():
        other.add_metric(key, total)
    yield other


class GPUCollector(Collector):
    """Registered once per process; reports for whichever monitor is running (or nothing)."""

    def __init__(self) -> None:
        self.monitor: Any = None
        self.user: str | None = None  # JupyterHub's user of this server, when there is one

    def collect(self) -> Iterator[Metric]:
        # A family without samples would still print its HELP and TYPE: leave it out entirely.
        families = (_without_empty_mig(family) for family in self._families() if family.samples)
        return families if self.user is None else (_with_user(f, self.user) for f in families)

    def _families(self) -> Iterator[Metric]:
        monitor = self.monitor
        if monitor is None:
            return
        status = monitor.sampler.status
        available = GaugeMetricFamily("jupyter_gpu_available", "1 when NVML works and sees at least one GPU.")
        available.add_metric([], 1.0 if status.available else 0.0)
        yield available
        simulated = GaugeMetricFamily(
            "jupyter_gpu_simulated",
            "1 when the readings are replayed (simulated backend), not read from GPUs.",
        )
        simulated.add_metric([], 1.0 if monitor.simulated else 0.0)
        yield simulated
        latest = monitor.sampler.latest()
        if not status.available or latest is None:
            return
        keys = GpuKeys(status.devices)
        yield info_family(status.system, status.devices)
        yield from gpu_families(latest.gpus)
        yield xid_family(monitor.exits.xid_counts(), keys)
        if monitor.kernels.last:
            yield from kernel_families(monitor.kernels.last, monitor.metrics_kernel_labels, keys)


def _without_empty_mig(family: Metric) -> Metric:
    """A whole GPU's series without GPU_I_ID and GPU_I_PROFILE: empty, they are no labels to
    Prometheus, and its series read as before MIG devices had their own."""
    family.samples = [
        s._replace(labels={k: v for k, v in s.labels.items() if v or k not in MIG_LABELS})
        for s in family.samples
    ]
    return family


def _with_user(family: Metric, user: str) -> Metric:
    family.samples = [s._replace(labels={**s.labels, "user": user}) for s in family.samples]
    return family


COLLECTOR = GPUCollector()
_registered = False


def attach(monitor: Any) -> None:
    global _registered
    if not _registered:
        REGISTRY.register(COLLECTOR)
        _registered = True
    COLLECTOR.monitor = monitor
    COLLECTOR.user = os.environ.get("JUPYTERHUB_USER") or None  # the Hub's spawner sets it


def detach(monitor: Any) -> None:
    if COLLECTOR.monitor is monitor:
        COLLECTOR.monitor = None
