"""A stand-in for the ``pynvml`` module that replays readings captured on real GPUs.

It serves the server's tests and UI tests on machines without a GPU, and can inject the faults
real NVML produces (library missing, driver not loaded, GPU lost, unsupported fields, calls that
fail only sometimes). It is never the default backend, and everything it feeds is marked
``simulated`` in the API and the UI.

Readings use the format of ``tests/fixtures/nvml_readings_2gpu.json``; a file of the form
``{"init_error": "NVML_ERROR_DRIVER_NOT_LOADED"}`` simulates a machine where NVML cannot start.
Its clocks event reasons and field values (memory temperature, ECC, remapped rows) come from
the ``nvidia-smi -q`` taken with it; a field missing there is not supported, as on the H200
(retired pages). The energy counter is the recorded power integrated since this stand-in started.

A file with a ``trace`` (``{"frame_seconds": 0.2, "frames": [[{device fields}, ...], ...]}``, as
``benchmarks/record_trace.py`` writes it) replays a recording: each frame overrides the moving
fields of every device (utilisation, memory, power, temperature, clocks, PCIe, GPM's activity
figures, processes) for
``frame_seconds``, looping, so a demo moves as the recorded GPUs did. A frame's processes are added
to the device's own ``compute_processes``, which tests may extend.

A device in MIG mode (``"mig_mode": [1, 1]``) lists its MIG devices in ``mig_devices`` (``uuid``,
``name``, ``gpu_instance_id``, ``compute_instance_id``, ``memory``, ``memory_v2``,
``compute_processes``, and ``slot`` where it is not its place in the list), as
``tests/fixtures/nvml_readings_mig.json`` does. Their handles answer what real NVML answers for a
MIG device, and NVML_ERROR_NOT_SUPPORTED to every call about the whole GPU; the GPU itself reports
no utilisation in MIG mode. A fault or a lost GPU applies to its MIG devices too.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

# What a MIG device's handle answers; every other call is about the whole GPU.
MIG_CALLS = frozenset(
    {
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
    }
)
MAX_MIG_DEVICES = 7  # what NVML says of an H100 or H200


@dataclass(frozen=True)
class MigHandle:
    """A MIG device's handle: its GPU's and its own index (``nvmlDeviceGetMigDeviceHandleByIndex``)."""

    gpu: int
    index: int


class SimulatedNVML:
    """Implements the subset of the ``pynvml`` API that ``NvmlReader`` uses."""

    simulated = True  # what NvmlReader.simulated reports; the real pynvml has no such attribute

    def __init__(self, readings: dict[str, Any]) -> None:
        self.readings = readings
        self._lock = threading.Lock()
        # function name -> list of (device index or None, error code, remaining count or None)
        self._faults: dict[str, list[list[Any]]] = defaultdict(list)
        self._lost: set[int] = set()
        self._initialised = 0  # NVML counts nvmlInit/nvmlShutdown pairs
        init_error = readings.get("init_error")
        if init_error:
            self.fail("nvmlInit", getattr(pynvml, init_error))
        self.calls: dict[str, int] = defaultdict(int)
        self.threads: set[str] = set()  # names of the threads that called NVML
        self._started = time.monotonic()
        trace = readings.get("trace") or {}
        self._frames: list[list[dict[str, Any]]] = trace.get("frames") or []
        self._frame_seconds = float(trace.get("frame_seconds") or 1.0)
        self._xids: queue.Queue[tuple[int, int]] = queue.Queue()  # (device, xid) not yet waited for

    @classmethod
    def from_file(cls, path: str | Path) -> SimulatedNVML:
        return cls(json.loads(Path(path).read_text()))

    # -- fault injection ---------------------------------------------------------------------

    def fail(self, function: str, code: int, *, device: int | None = None, times: int | None = None) -> None:
        """Make ``function`` raise NVML error ``code`` (for ``times`` calls, or until cleared)."""
        with self._lock:
            self._faults[function].append([device, code, times])

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def lose_gpu(self, index: int) -> None:
        self._lost.add(index)

    def restore_gpu(self, index: int) -> None:
        self._lost.discard(index)

    def report_xid(self, index: int, xid: int) -> None:
        """Have GPU ``index`` report critical error ``xid`` to whoever waits on an event set."""
        self._xids.put((index, xid))

    def _check(self, function: str, handle: int | MigHandle | None = None) -> None:
        device = handle.gpu if isinstance(handle, MigHandle) else handle
        with self._lock:
            self.calls[function] += 1
            self.threads.add(threading.current_thread().name)
            if device is not None and device in self._lost and function != "nvmlDeviceGetCount":
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            for fault in self._faults.get(function, []):
                fault_device, code, times = fault
                if fault_device is not None and fault_device != device:
                    continue
                if times is not None:
                    if times <= 0:
                        continue
                    fault[2] = times - 1
                raise pynvml.NVMLError(code)
        if function != "nvmlInit" and not self._initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if isinstance(handle, MigHandle) and function not in MIG_CALLS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _device(self, handle: int | MigHandle) -> dict[str, Any]:
        if isinstance(handle, MigHandle):
            return self._mig_devices(handle.gpu)[handle.index]
        device = self.readings["devices"][handle]
        if not self._frames:
            return device
        elapsed = time.monotonic() - self._started
        frame = self._frames[int(elapsed / self._frame_seconds) % len(self._frames)][handle]
        processes = [*frame.get("compute_processes", ()), *device["compute_processes"]]
        return {**device, **frame, "compute_processes": processes}

    def _mig_devices(self, gpu: int) -> dict[int, dict[str, Any]]:
        """A GPU's MIG devices by their index; none unless its MIG mode is on."""
        device = self.readings["devices"][gpu]
        if not device["mig_mode"][0]:
            return {}
        return {m.get("slot", i): m for i, m in enumerate(device.get("mig_devices", ()))}

    def _mean_power_mw(self, handle: int) -> float:
        """The power the energy counter integrates: a replayed trace's mean, so it only grows."""
        if not self._frames:
            return self._device(handle)["power_mw"]
        return sum(frame[handle]["power_mw"] for frame in self._frames) / len(self._frames)

    # -- the pynvml API ----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        self._initialised = max(0, self._initialised - 1)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.readings["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.readings["cuda_driver_version"]

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.readings["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.readings["devices"]):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._check("nvmlDeviceGetUUID", h)
        return self._device(h)["uuid"]

    def nvmlDeviceGetName(self, h: int) -> str:
        self._check("nvmlDeviceGetName", h)
        return self._device(h)["name"]

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=self._device(h)["pci_bus_id"])

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo", h)
        device = self._device(h)
        return SimpleNamespace(**(device["memory_v2"] if version else device["memory"]))

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._check("nvmlDeviceGetEnforcedPowerLimit", h)
        return self._device(h)["power_limit_mw"]

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        return list(self._device(h)["mig_mode"])

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability", h)
        capability = self._device(h).get("cuda_capability")
        if capability is None:  # not in the capture
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return tuple(capability)

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter_type: int) -> int:
        self._check("nvmlDeviceGetTotalEccErrors", h)
        return self._device(h)["ecc_volatile_uncorrected"]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetUtilizationRates", h)
        if self._device(h)["mig_mode"][0]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(**self._device(h)["utilization"])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", h)
        return self._device(h)["temperature_c"]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._check("nvmlDeviceGetPowerUsage", h)
        return self._device(h)["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption", h)
        return round(self._mean_power_mw(h) * (time.monotonic() - self._started))  # mJ

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        self._check("nvmlDeviceGetCurrentClocksEventReasons", h)
        return self._device(h)["clocks_event_reasons"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return self._device(h)["clocks_event_reasons"]

    def nvmlDeviceGetFieldValues(self, h: int, field_ids: list[int]) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetFieldValues", h)
        recorded = {getattr(pynvml, name): value for name, value in self._device(h)["field_values"].items()}
        return [
            SimpleNamespace(
                fieldId=field_id,
                nvmlReturn=pynvml.NVML_SUCCESS if field_id in recorded else pynvml.NVML_ERROR_NOT_SUPPORTED,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                value=SimpleNamespace(ullVal=recorded.get(field_id, 0)),
            )
            for field_id in field_ids
        ]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        self._check("nvmlDeviceGetClockInfo", h)
        key = "clock_sm_mhz" if clock == pynvml.NVML_CLOCK_SM else "clock_mem_mhz"
        return self._device(h)[key]

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        self._check("nvmlDeviceGetFanSpeed", h)
        fan = self._device(h).get("fan")
        if not isinstance(fan, int):  # recorded as {"error": ...} where the GPU has no fan
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return fan

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        self._check("nvmlDeviceGetPcieThroughput", h)
        key = "pcie_rx_kbs" if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES else "pcie_tx_kbs"
        return self._device(h)[key]

    # -- GPU performance monitoring: a device's ``gpm`` ({metric id: value in NVML's unit}) -------

    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION

    class c_nvmlGpmMetricsGet_t(SimpleNamespace):  # noqa: N801 (pynvml's name)
        def __init__(self) -> None:
            super().__init__(version=0, numMetrics=0, sample1=None, sample2=None)
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(32)]

    def nvmlGpmQueryDeviceSupport(self, h: int) -> SimpleNamespace:
        self._check("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(isSupportedDevice=int("gpm" in self._device(h)))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        self._check("nvmlGpmSampleAlloc")
        return SimpleNamespace(gpm=None)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        self._check("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, h: int, sample: SimpleNamespace) -> SimpleNamespace:
        """A frame's figures are its averages: the metrics up to a sample are its frame's."""
        self._check("nvmlGpmSampleGet", h)
        if "gpm" not in self._device(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        sample.gpm = self._device(h)["gpm"]
        return sample

    def nvmlGpmMetricsGet(self, request: SimpleNamespace) -> SimpleNamespace:
        self._check("nvmlGpmMetricsGet")
        if request.sample1 is None or request.sample2 is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for slot in request.metrics[: request.numMetrics]:
            value = request.sample2.gpm.get(str(slot.metricId))
            slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if value is None else pynvml.NVML_SUCCESS
            slot.value = value or 0.0
        return request

    def _processes(self, h: int) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_gpu_memory"])
            for p in self._device(h)["compute_processes"]
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses", h)
        return self._processes(h)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: int) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses_v2", h)
        return self._processes(h)

    def nvmlDeviceGetIndex(self, h: int) -> int:
        self._check("nvmlDeviceGetIndex", h)
        return h

    # -- MIG -----------------------------------------------------------------------------------

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        return MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, index: int) -> MigHandle:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if not 0 <= index < MAX_MIG_DEVICES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index not in self._mig_devices(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return MigHandle(h, index)

    def nvmlDeviceGetGpuInstanceId(self, h: int | MigHandle) -> int:
        self._check("nvmlDeviceGetGpuInstanceId", h)
        return self._instance(h)["gpu_instance_id"]

    def nvmlDeviceGetComputeInstanceId(self, h: int | MigHandle) -> int:
        self._check("nvmlDeviceGetComputeInstanceId", h)
        return self._instance(h)["compute_instance_id"]

    def _instance(self, h: int | MigHandle) -> dict[str, Any]:
        """A MIG device's record; a GPU's handle has no instance ids."""
        if not isinstance(h, MigHandle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._device(h)

    # -- events: one set, fed by ``report_xid`` -------------------------------------------------

    def nvmlEventSetCreate(self) -> object:
        self._check("nvmlEventSetCreate")
        return object()

    def nvmlDeviceRegisterEvents(self, h: int, event_types: int, event_set: object) -> None:
        self._check("nvmlDeviceRegisterEvents", h)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        self._check("nvmlEventSetWait_v2")
        try:
            device, xid = self._xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
        return SimpleNamespace(device=device, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._check("nvmlEventSetFree")
