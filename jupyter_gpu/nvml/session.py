"""An NVML session: initialised lazily, its device handles cached, every failure sorted into
what it means (``errors``), for the reader built on it (``reader``).

Two failures are states rather than fields: ``GpuLost`` (one device is gone) and
``NvmlUnavailable`` (NVML itself is gone). Calls that exist in several versions are tried newest
first once per session, and the version the driver answered is kept, as nvitop's libnvml does: an
old driver costs one failed call per session, not one per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import pynvml

from . import mig
from .errors import FATAL_CODES, LOST_CODES, MISSING_VERSION_CODES, code_of, field_reason, problem
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


class NvmlSession:
    """Lazily initialised NVML session. Not thread-safe: one owner thread per session."""

    def __init__(self, nvml: ModuleType | Any = pynvml) -> None:
        self.nvml = nvml
        self._count = 0  # GPUs, as nvmlDeviceGetCount said when the session opened
        self._handles: dict[int, Any] = {}
        self._slots: dict[int, mig.Slot] = {}  # index of a MIG device -> where it is
        self._versions: dict[str, str] = {}  # versioned call -> the version this driver answers
        # (device index, field) -> why not: NVML's "not supported" is the device's answer for good,
        # and some are slow to give it (an H200's fan speed: 0.1-0.4 ms each time)
        self._not_supported: dict[tuple[int, str], str] = {}
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
        self._count = count
        return count

    def close(self) -> None:
        self._handles.clear()
        self._not_supported.clear()
        if self.is_open:
            self.is_open = False
            try:
                self.nvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    def forget(self, index: int) -> None:
        """Drop a cached handle so that the next read looks the device up again."""
        self._handles.pop(index, None)
        self._not_supported = {k: v for k, v in self._not_supported.items() if k[0] != index}

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            slot = self._slots.get(index)
            try:
                self._handles[index] = (
                    self.nvml.nvmlDeviceGetHandleByIndex(index)
                    if slot is None
                    else self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(self._handle(slot.parent), slot.slot)
                )
            except pynvml.NVMLError as error:
                self._raise_state(error)
                where = f"GPU {index}" if slot is None else f"MIG device {slot.slot} of GPU {slot.parent}"
                raise GpuLost(f"{where} cannot be opened: {error}") from None
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

    def _field(
        self,
        values: Values,
        unsupported: Unsupported,
        name: str,
        call: Callable[[], Any],
        convert: Callable[[Any], Any] = lambda v: v,
        device: int | None = None,
    ) -> None:
        """``values[name]`` from ``call``, or None and why in ``unsupported``; with ``device``, a
        field that device does not support is not asked again this session."""
        known = None if device is None else self._not_supported.get((device, name))
        if known is not None:
            values[name] = None
            unsupported[name] = known
            return
        try:
            values[name] = convert(call())
        except pynvml.NVMLError as error:
            self._raise_state(error)
            values[name] = None
            unsupported[name] = field_reason(error)
            if device is not None and code_of(error) == pynvml.NVML_ERROR_NOT_SUPPORTED:
                self._not_supported[(device, name)] = unsupported[name]

    def _raise_state(self, error: pynvml.NVMLError) -> None:
        code = code_of(error)
        if code in LOST_CODES:
            raise GpuLost(str(error)) from None
        if code in FATAL_CODES:
            self.close()
            raise NvmlUnavailable(problem(error), str(error)) from None
