"""NVML's critical-error events (XIDs) on a thread of their own.

``nvmlEventSetWait`` blocks, so the events never share the sampler's thread or the event loop;
it waits at most ``WAIT_MS`` at a time so that ``stop`` is prompt. A GPU or driver without event
support says so in ``unsupported`` and the rest carry on, as every other NVML field does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pynvml

from .errors import code_of, field_reason

WAIT_MS = 500
OnXid = Callable[[int, int, float], None]  # (gpu index, xid, unix time)


class XidWatcher:
    """Calls ``on_xid`` for each critical XID any GPU reports, until ``stop``."""

    def __init__(self, on_xid: OnXid, nvml: ModuleType | Any = pynvml) -> None:
        self.nvml = nvml
        self.on_xid = on_xid
        self.unsupported: dict[int, str] = {}  # gpu index -> why its events cannot be read
        self.reason: str | None = None  # why no events can be read at all
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Register on every GPU and wait for events, on the thread; ``reason`` and
        ``unsupported`` then say what failed."""
        self._thread = threading.Thread(target=self._run, name="jupyter_gpu-xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_MS / 1000 * 4)

    def _register(self) -> Any:
        nvml = self.nvml
        events = nvml.nvmlEventSetCreate()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                nvml.nvmlDeviceRegisterEvents(
                    nvml.nvmlDeviceGetHandleByIndex(index), pynvml.nvmlEventTypeXidCriticalError, events
                )
            except pynvml.NVMLError as error:
                self.unsupported[index] = field_reason(error)
        return events

    def _run(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except pynvml.NVMLError as error:
            self.reason = f"NVML cannot start: {error}"
            return
        try:
            try:
                events = self._register()
            except pynvml.NVMLError as error:
                self.reason = f"NVML's events cannot be read here: {field_reason(error)}"
                return
            self._wait(events)
        finally:
            nvml.nvmlShutdown()

    def _wait(self, events: Any) -> None:
        nvml = self.nvml
        try:
            while not self._stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(events, WAIT_MS)
                except pynvml.NVMLError as error:
                    if code_of(error) == pynvml.NVML_ERROR_TIMEOUT:
                        continue
                    self.reason = f"NVML stopped giving events: {field_reason(error)}"
                    return
                if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                    try:
                        index = nvml.nvmlDeviceGetIndex(data.device)
                    except pynvml.NVMLError:
                        index = -1
                    self.on_xid(int(index), int(data.eventData), time.time())
        finally:
            nvml.nvmlEventSetFree(events)
