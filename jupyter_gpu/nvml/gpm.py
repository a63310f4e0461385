"""GPU performance monitoring (GPM, Hopper and later): what the SMs, tensor cores, memory and
links really did, which NVML's utilisation (the share of time *any* kernel ran) cannot say.

GPM answers between two samples: each reading takes a new sample of the GPU and asks NVML for the
metrics since the one before, so every figure is an average over the interval between readings
and the first reading of a GPU has none. On an H200 one sample costs ~33 µs and the metrics below
~86 µs together, so they are read on the fast cadence; GPM's PCIe figures are averages over the
same interval and cost nothing more, where NVML's PCIe counter takes ~21 ms per call
(``slow`` skips that counter on a GPU whose PCIe figures GPM gives).
"""

from __future__ import annotations

from typing import Any

import pynvml

from .errors import field_reason
from .fields import GPM_FIELDS, GPM_INTEGER, GPM_METRICS
from .session import Unsupported, Values

NO_GPM = "needs GPU performance monitoring (Hopper or later, driver 520 or newer)"


class GpmReader:
    """GPM samples per GPU for one NVML session's owner thread; ``close`` frees them."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._support: dict[int, str | None] = {}  # GPU index -> why not (None: supported)
        self._last: dict[int, Any] = {}  # GPU index -> its latest sample
        self._spare: dict[int, Any] = {}  # GPU index -> a sample to take the next reading in
        self._request: Any = None  # one metrics request, reused (it holds 477 metric slots)

    def unsupported(self, index: int, handle: Any) -> str | None:
        """Why this GPU has no GPM figures, or None; asked of NVML once per GPU."""
        if index not in self._support:
            why: str | None = NO_GPM
            if hasattr(self.nvml, "nvmlGpmQueryDeviceSupport"):
                try:
                    why = None if self.nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice else NO_GPM
                except pynvml.NVMLError as error:
                    why = f"{NO_GPM}: {field_reason(error)}"
            self._support[index] = why
        return self._support[index]

    def read(self, index: int, handle: Any, values: Values, unsupported: Unsupported) -> None:
        """Fill every GPM field of one GPU: the figures since its last reading, null (with no
        reason) on its first, null with the reason where it has no GPM. NVML errors other than a
        metric's own return code propagate, for the session to sort into states."""
        why = self.unsupported(index, handle)
        if why is not None:  # PCIe then comes from NVML's counter on the slow cadence
            values.update(dict.fromkeys(GPM_FIELDS))
            unsupported.update(dict.fromkeys(GPM_FIELDS, why))
            return
        values.update(dict.fromkeys(m.name for m in GPM_METRICS))
        sample = self._spare.pop(index, None) or self.nvml.nvmlGpmSampleAlloc()
        try:
            self.nvml.nvmlGpmSampleGet(handle, sample)
        except pynvml.NVMLError:
            self._spare[index] = sample
            raise
        before, self._last[index] = self._last.get(index), sample
        if before is None:
            return
        self._spare[index] = before
        request = self._metrics_request(before, sample)
        self.nvml.nvmlGpmMetricsGet(request)
        for slot, metric in zip(request.metrics, GPM_METRICS):
            if slot.nvmlReturn != pynvml.NVML_SUCCESS:
                unsupported[metric.name] = field_reason(pynvml.NVMLError(slot.nvmlReturn))
                continue
            value = max(0.0, slot.value * metric.scale)
            values[metric.name] = round(value) if metric.name in GPM_INTEGER else round(value, 1)

    def _metrics_request(self, before: Any, after: Any) -> Any:
        if self._request is None:
            self._request = self.nvml.c_nvmlGpmMetricsGet_t()
            self._request.version = self.nvml.NVML_GPM_METRICS_GET_VERSION
            self._request.numMetrics = len(GPM_METRICS)
            for slot, metric in zip(self._request.metrics, GPM_METRICS):
                slot.metricId = metric.metric_id
        self._request.sample1, self._request.sample2 = before, after
        return self._request

    def forget(self, index: int) -> None:
        """A GPU lost or gone: its samples go, and its support is asked again."""
        self._support.pop(index, None)
        for held in (self._last, self._spare):
            sample = held.pop(index, None)
            if sample is not None:
                self._free(sample)

    def close(self) -> None:
        for index in list(self._support):
            self.forget(index)
        self._request = None

    def _free(self, sample: Any) -> None:
        try:
            self.nvml.nvmlGpmSampleFree(sample)
        except pynvml.NVMLError:
            pass  # NVML already shut down: its samples went with it
