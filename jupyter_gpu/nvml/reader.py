"""Read NVML one field at a time, so that one failing call costs one field, not a sample.

Every reading is a pair ``(values, unsupported)``: a field that cannot be read is ``None`` in
``values`` and its reason is in ``unsupported``. The session under the reader (``session``) opens
NVML, keeps its handles and sorts its failures: a lost GPU and an unusable NVML are states
(``GpuLost``, ``NvmlUnavailable``), not fields. Which fields there are, and how NVML's raw values
become ours, is in ``fields``; what an error means, in ``errors``; MIG devices, in ``mig``.

Calls that exist in several versions (memory info v2 and v1, process lists v3 and v2) are tried
newest first once per reader, and the version the driver answered is kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pynvml

from . import mig
from .errors import field_reason
from .fields import (
    FIELD_VALUES,
    GPM_METRICS,
    PCIE_FIELDS,
    as_text,
    clock_reasons,
    cuda_version_text,
    field_value,
    milli,
)
from .gpm import GpmReader
from .session import GpuLost, NvmlSession, NvmlUnavailable, Unsupported, Values

__all__ = ["GpuLost", "NvmlReader", "NvmlUnavailable"]


class NvmlReader(NvmlSession):
    """What NVML says of each device. Not thread-safe: one owner thread per reader."""

    def __init__(self, nvml: Any = pynvml) -> None:
        super().__init__(nvml)
        self._mig: dict[int, bool] = {}  # GPU index -> MIG mode on
        self._children: dict[int, list[int]] = {}  # GPU index -> indices of its MIG devices
        self._gpm = GpmReader(nvml)

    def close(self) -> None:
        self._gpm.close()  # its samples are NVML's: freed while NVML is still open
        super().close()

    def forget(self, index: int) -> None:
        self._gpm.forget(index)
        super().forget(index)

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

    def devices(
        self, on_lost: Callable[[int, GpuLost], None] | None = None
    ) -> Iterator[tuple[Values, Unsupported]]:
        """``device_info`` of every device in nvitop's order: each GPU, then its MIG devices. A GPU
        keeps NVML's index (nvidia-smi's); MIG devices are numbered after all GPUs, in that order.
        A GPU that cannot be read raises GpuLost, or is left out after ``on_lost`` is told."""
        self._slots.clear()
        self._children.clear()
        after = self._count
        for index in range(self._count):
            try:
                info, unsupported = self.device_info(index)
            except GpuLost as error:
                if on_lost is None:
                    raise
                on_lost(index, error)
                continue
            children = []  # known before the GPU is read: its processes are theirs
            for slot, handle in self._mig_handles(index, unsupported):
                self._slots[after], self._handles[after] = mig.Slot(index, slot), handle
                children.append(after)
                after += 1
            self._children[index] = children
            yield info, unsupported
            for child in children:
                yield self._mig_info(child, info)

    def _mig_handles(self, index: int, unsupported: Unsupported) -> list[tuple[int, Any]]:
        """The MIG devices of a GPU in MIG mode; none, and why, where NVML cannot list them (its
        processes then stay the GPU's)."""
        if not self._mig[index]:
            return []
        try:
            return list(mig.handles(self.nvml, self._handle(index)))
        except pynvml.NVMLError as error:
            self._raise_state(error)
            unsupported["mig_devices"] = f"MIG devices cannot be listed: {field_reason(error)}"
            return []

    def find(self, uuid: str) -> Values | None:
        """The ``device_info`` of the GPU or MIG device with this UUID, as NVML or PyTorch spells it."""
        want = mig.bare_uuid(uuid)
        return next((info for info, _ in self.devices() if mig.bare_uuid(info["uuid"] or "") == want), None)

    def device_info(self, index: int) -> tuple[Values, Unsupported]:
        """What does not change while the server runs, of one GPU (``devices`` adds its MIG devices)."""
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
        values["mig"] = None  # a whole GPU
        return values, unsupported

    def _mig_info(self, index: int, gpu: Values) -> tuple[Values, Unsupported]:
        """``device_info`` of a MIG device of ``gpu``: its own UUID, name and memory, where it
        sits (GPU and compute instance, profile), and null for what is the whole GPU's."""
        nvml, h, parent = self.nvml, self._handle(index), gpu["index"]
        values: Values = {"index": index}
        unsupported: Unsupported = {
            "power_limit_watts": mig.gpu_wide(parent),
            "mig_mode": mig.gpu_wide(parent),
        }
        self._field(values, unsupported, "uuid", lambda: nvml.nvmlDeviceGetUUID(h), as_text)
        self._field(values, unsupported, "name", lambda: nvml.nvmlDeviceGetName(h), as_text)
        values["pci_bus_id"] = gpu.get("pci_bus_id")  # the PCI device it is part of
        self._field(values, unsupported, "memory_total_bytes", lambda: nvml.nvmlDeviceGetMemoryInfo(h).total)
        ids: Values = {}
        self._field(ids, unsupported, "gpu_instance_id", lambda: nvml.nvmlDeviceGetGpuInstanceId(h))
        self._field(ids, unsupported, "compute_instance_id", lambda: nvml.nvmlDeviceGetComputeInstanceId(h))
        profile = mig.profile(values["name"])
        if profile is None:
            unsupported["profile"] = f"no MIG profile in its name ({values['name']})"
        values.update(
            power_limit_watts=None,
            mig_mode=None,
            mig={"parent_index": parent, "parent_uuid": gpu.get("uuid"), **ids, "profile": profile},
        )
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
        slot = self._slots.get(index)
        if slot is not None:  # a MIG device: its memory and processes, nothing of the whole GPU
            self._field(values, unsupported, "processes", lambda: self._processes(h))
            missing = mig.not_on_mig(slot.parent)
            return {**values, **dict.fromkeys(missing)}, {**unsupported, **missing}
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
            device=index,
        )
        self._field(
            values, unsupported, "power_watts", lambda: nvml.nvmlDeviceGetPowerUsage(h), milli, device=index
        )
        self._field(
            values,
            unsupported,
            "clock_throttle_reasons",
            lambda: self._throttle_mask(h),
            clock_reasons,
            device=index,
        )
        self._field(
            values,
            unsupported,
            "clock_sm_mhz",
            lambda: nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            device=index,
        )
        self._field(
            values,
            unsupported,
            "clock_mem_mhz",
            lambda: nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            device=index,
        )
        self._field(
            values, unsupported, "fan_speed_percent", lambda: nvml.nvmlDeviceGetFanSpeed(h), device=index
        )
        self._activity(index, h, values, unsupported)
        if self._children.get(index):  # each process counts on the MIG device it runs on
            values["processes"] = None
            unsupported["processes"] = mig.PROCESSES_ON_MIG
        else:
            self._field(values, unsupported, "processes", lambda: self._processes(h))
        return values, unsupported

    def slow(self, index: int) -> tuple[Values, Unsupported]:
        """PCIe throughput (NVML samples it over ~20 ms per call; ``fast`` reads it from GPM
        where the GPU has GPM), the energy counter (2.4 ms on an H200) and the field values (a
        few ms), so they run on their own cadence."""
        nvml, h = self.nvml, self._handle(index)
        values: Values = {}
        unsupported: Unsupported = {}
        for name, counter in (
            ()
            if self._gpm.unsupported(index, h) is None
            else zip(PCIE_FIELDS, (pynvml.NVML_PCIE_UTIL_RX_BYTES, pynvml.NVML_PCIE_UTIL_TX_BYTES))
        ):
            self._field(
                values,
                unsupported,
                name,
                functools.partial(nvml.nvmlDeviceGetPcieThroughput, h, counter),
                lambda kib: kib * 1024,
            )
        self._field(
            values,
            unsupported,
            "energy_joules",
            lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h),
            milli,
            device=index,
        )
        self._field_values(h, values, unsupported)
        return values, unsupported

    def processes(self, index: int) -> list[Values]:
        """The compute processes on one GPU or MIG device, alone: what a kernel reads at each
        cell's edges."""
        try:
            return self._processes(self._handle(index))
        except pynvml.NVMLError as error:
            self._raise_state(error)
            raise GpuLost(f"GPU {index} cannot list its processes: {error}") from None

    # -- internals ---------------------------------------------------------------------------

    def _activity(self, index: int, h: Any, values: Values, unsupported: Unsupported) -> None:
        """GPM's figures since this GPU's last reading (``gpm``); a failed read costs only them."""
        try:
            self._gpm.read(index, h, values, unsupported)
        except pynvml.NVMLError as error:
            self._raise_state(error)
            reason = field_reason(error, mig_enabled=self._mig.get(index, False))
            for metric in GPM_METRICS:
                values[metric.name] = None
                unsupported[metric.name] = reason

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
