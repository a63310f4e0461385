"""Read NVML one field at a time, so that one failing call costs one field, not a sample.

Every reading is a pair ``(values, unsupported)``: a field that cannot be read is ``None`` in
``values`` and its reason is in ``unsupported``. Two failures are states rather than fields:
``GpuLost`` (one GPU is gone) and ``NvmlUnavailable`` (NVML itself is gone).

Calls that exist in several versions (memory info v2 and v1, process lists v3 and v2) are tried
newest first once per reader, and the version the driver answered is kept, as nvitop's libnvml
does: an old driver costs one failed call per session, not one per sample. Which fields there
are, and how NVML's raw values become ours, is in ``fields``; what an error means, in ``errors``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pynvml

from .errors import FATAL_CODES, LOST_CODES, MISSING_VERSION_CODES, code_of, field_reason, problem
from .fields import (
    FIELD_VALUES,
    PCIE_FIELDS,
    as_text,
    clock_reasons,
    cuda_version_text,
    field_value,
    milli,
)
from .reasons import PROBLEMS, Problem

Values = dict[str, Any]
Unsupported = dict[str, str]


class NvmlUnavailable(Exception):
    """NVML cannot be used at all; ``reason`` says why and what to do, ``detail`` is NVML's word."""

    def __init__(self, why: Problem, detail: str | None = None) -> None:
        super().__init__(why.sentence)
        self.problem = why
        self.reason = why.sentence
        self.detail = detail


class GpuLost(Exception):
    """One GPU stopped answering (fallen off the bus, needs a reset)."""


class NvmlReader:
    """Lazily initialised NVML session. Not thread-safe: one owner thread per reader."""

    def __init__(self, nvml: ModuleType | Any = pynvml) -> None:
        self.nvml = nvml
        self._handles: dict[int, Any] = {}
        self._mig: dict[int, bool] = {}
        self._versions: dict[str, str] = {}  # versioned call -> the version this driver answers
        self.is_open = False

    @property
    def simulated(self) -> bool:
        """Whether the readings are replayed (``SimulatedNVML``) rather than read from GPUs."""
        return bool(getattr(self.nvml, "simulated", False))

    def open(self) -> int:
        """Initialise NVML and return the GPU count; raise ``NvmlUnavailable`` with a reason."""
        try:
            self.nvml.nvmlInit()
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(problem(error), str(error)) from None
        self.is_open = True
        if count == 0:
            self.close()
            raise NvmlUnavailable(PROBLEMS["no_devices"])
        return count

    def close(self) -> None:
        self._handles.clear()
        if self.is_open:
            self.is_open = False
            try:
                self.nvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    def system(self) -> Values:
        values: Values = {}
        unsupported: Unsupported = {}
        self._field(values, unsupported, "driver_version", self.nvml.nvmlSystemGetDriverVersion, as_text)
        self._field(
            values,
            unsupported,
            "cuda_driver_version",
            self.nvml.nvmlSystemGetCudaDriverVersion,
            cuda_version_text,
        )
        return values

    def device_info(self, index: int) -> tuple[Values, Unsupported]:
        """What does not change while the server runs."""
        nvml, h = self.nvml, self._handle(index)
        values: Values = {"index": index}
        unsupported: Unsupported = {}
        self._field(values, unsupported, "uuid", lambda: nvml.nvmlDeviceGetUUID(h), as_text)
        self._field(values, unsupported, "name", lambda: nvml.nvmlDeviceGetName(h), as_text)
        self._field(values, unsupported, "pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(h).busId, as_text)
        self._field(
            values,
            unsupported,
            "memory_total_bytes",
            lambda: nvml.nvmlDeviceGetMemoryInfo(h).total,
        )
        self._field(
            values,
            unsupported,
            "power_limit_watts",
            lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h),
            milli,
        )
        self._field(
            values,
            unsupported,
            "mig_mode",
            lambda: nvml.nvmlDeviceGetMigMode(h),
            lambda m: {"current": bool(m[0]), "pending": bool(m[1])},
        )
        self._mig[index] = bool(values["mig_mode"] and values["mig_mode"]["current"])
        return values, unsupported

    def diagnostics(self, index: int) -> tuple[Values, Unsupported]:
        """What the doctor checks beyond ``device_info``: the CUDA compute capability, and the
        uncorrected ECC errors counted since the driver loaded."""
        nvml, h = self.nvml, self._handle(index)
        values: Values = {}
        unsupported: Unsupported = {}
        self._field(
            values, unsupported, "cuda_capability", lambda: nvml.nvmlDeviceGetCudaComputeCapability(h), tuple
        )
        self._field(
            values,
            unsupported,
            "ecc_uncorrected_volatile",
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
            ),
        )
        return values, unsupported

    def fast(self, index: int) -> tuple[Values, Unsupported]:
        """The cheap fields (tens of microseconds each), read every sample."""
        nvml, h = self.nvml, self._handle(index)
        values: Values = {}
        unsupported: Unsupported = {}
        self._memory(h, values, unsupported)
        try:
            rates = nvml.nvmlDeviceGetUtilizationRates(h)
            values["utilization_gpu_percent"] = rates.gpu
            values["utilization_memory_percent"] = rates.memory
        except pynvml.NVMLError as error:
            self._raise_state(error)
            reason = field_reason(error, mig_enabled=self._mig.get(index, False))
            for name in ("utilization_gpu_percent", "utilization_memory_percent"):
                values[name] = None
                unsupported[name] = reason
        self._field(
            values,
            unsupported,
            "temperature_celsius",
            lambda: nvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        )
        self._field(values, unsupported, "power_watts", lambda: nvml.nvmlDeviceGetPowerUsage(h), milli)
        self._field(
            values, unsupported, "energy_joules", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h), milli
        )
        self._field(
            values, unsupported, "clock_throttle_reasons", lambda: self._throttle_mask(h), clock_reasons
        )
        self._field(
            values,
            unsupported,
            "clock_sm_mhz",
            lambda: nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        )
        self._field(
            values,
            unsupported,
            "clock_mem_mhz",
            lambda: nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        )
        self._field(values, unsupported, "fan_speed_percent", lambda: nvml.nvmlDeviceGetFanSpeed(h))
        self._field(values, unsupported, "processes", lambda: self._processes(h))
        return values, unsupported

    def slow(self, index: int) -> tuple[Values, Unsupported]:
        """PCIe throughput (NVML samples it over ~20 ms per call) and the field values (a few ms),
        so they run on their own cadence."""
        nvml, h = self.nvml, self._handle(index)
        values: Values = {}
        unsupported: Unsupported = {}
        for name, counter in zip(
            PCIE_FIELDS, (pynvml.NVML_PCIE_UTIL_RX_BYTES, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        ):
            self._field(
                values,
                unsupported,
                name,
                functools.partial(nvml.nvmlDeviceGetPcieThroughput, h, counter),
                lambda kib: kib * 1024,
            )
        self._field_values(h, values, unsupported)
        return values, unsupported

    def processes(self, index: int) -> list[Values]:
        """The compute processes on one GPU, alone: what a kernel reads at each cell's edges."""
        try:
            return self._processes(self._handle(index))
        except pynvml.NVMLError as error:
            self._raise_state(error)
            raise GpuLost(f"GPU {index} cannot list its processes: {error}") from None

    def forget(self, index: int) -> None:
        """Drop a cached handle so that the next read looks the GPU up again."""
        self._handles.pop(index, None)

    # -- internals ---------------------------------------------------------------------------

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            try:
                self._handles[index] = self.nvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as error:
                self._raise_state(error)
                raise GpuLost(f"GPU {index} cannot be opened: {error}") from None
        return self._handles[index]

    def _versioned(self, call: str, versions: Sequence[tuple[str, Callable[[], Any]]]) -> tuple[str, Any]:
        """(version, result) of the newest version of ``call`` this driver has: probed on first
        use, newest first, then remembered; the last version's error is raised as it comes."""
        known = self._versions.get(call)
        candidates = [v for v in versions if known in (None, v[0])]
        for version, attempt in candidates[:-1]:
            try:
                result = attempt()
            except pynvml.NVMLLibraryMismatchError:  # pynvml's word for a missing newer symbol
                continue
            except pynvml.NVMLError as error:
                if code_of(error) not in MISSING_VERSION_CODES:
                    raise
                continue
            self._versions[call] = version
            return version, result
        version, attempt = candidates[-1]
        result = attempt()
        self._versions[call] = version
        return version, result

    def _memory(self, h: Any, values: Values, unsupported: Unsupported) -> None:
        """Memory v2 separates the driver's reserve (~615 MiB on H200) from what processes use;
        drivers before 510 have only v1, whose ``used`` includes the reserve."""
        names = ("memory_used_bytes", "memory_reserved_bytes", "memory_free_bytes", "memory_total_bytes")
        nvml = self.nvml
        try:
            version, info = self._versioned(
                "memory",
                (
                    ("v2", lambda: nvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)),
                    ("v1", lambda: nvml.nvmlDeviceGetMemoryInfo(h)),
                ),
            )
        except pynvml.NVMLError as error:
            self._raise_state(error)
            for name in names:
                values[name] = None
                unsupported[name] = field_reason(error)
            return
        values.update(
            memory_used_bytes=info.used,
            memory_reserved_bytes=info.reserved if version == "v2" else None,
            memory_free_bytes=info.free,
            memory_total_bytes=info.total,
        )
        if version == "v1":
            unsupported["memory_reserved_bytes"] = "needs memory info v2 (driver 510 or newer)"

    def _throttle_mask(self, h: Any) -> int:
        nvml = self.nvml
        _, mask = self._versioned(
            "clocks_event_reasons",
            (
                ("event", lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
                ("throttle", lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),  # before 535
            ),
        )
        return mask

    def _field_values(self, h: Any, values: Values, unsupported: Unsupported) -> None:
        """Each field carries its own return code: one unsupported field costs only itself."""
        try:
            answers = self.nvml.nvmlDeviceGetFieldValues(h, [field_id for _, field_id in FIELD_VALUES])
        except pynvml.NVMLError as error:
            self._raise_state(error)
            for name, _ in FIELD_VALUES:
                values[name] = None
                unsupported[name] = field_reason(error)
            return
        for (name, _), answer in zip(FIELD_VALUES, answers):
            values[name] = None
            if answer.nvmlReturn != pynvml.NVML_SUCCESS:
                failure = pynvml.NVMLError(answer.nvmlReturn)
                self._raise_state(failure)
                unsupported[name] = field_reason(failure)
            else:
                try:
                    values[name] = field_value(name, answer)
                except ValueError as error:
                    unsupported[name] = f"read failed: {error}"

    def _processes(self, h: Any) -> list[Values]:
        nvml = self.nvml
        _, procs = self._versioned(
            "processes",
            (
                ("v3", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h)),  # pynvml calls v3
                ("v2", lambda: nvml.nvmlDeviceGetComputeRunningProcesses_v2(h)),
            ),
        )
        # `usedGpuMemory` is None when the driver withholds it (e.g. under some containers)
        return [{"pid": p.pid, "used_memory_bytes": p.usedGpuMemory} for p in procs]

    def _field(
        self,
        values: Values,
        unsupported: Unsupported,
        name: str,
        call: Callable[[], Any],
        convert: Callable[[Any], Any] = lambda v: v,
    ) -> None:
        try:
            values[name] = convert(call())
        except pynvml.NVMLError as error:
            self._raise_state(error)
            values[name] = None
            unsupported[name] = field_reason(error)

    def _raise_state(self, error: pynvml.NVMLError) -> None:
        code = code_of(error)
        if code in LOST_CODES:
            raise GpuLost(str(error)) from None
        if code in FATAL_CODES:
            self.close()
            raise NvmlUnavailable(problem(error), str(error)) from None
