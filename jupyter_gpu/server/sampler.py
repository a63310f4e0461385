"""One NVML sampler per server: background threads fill a ring buffer that handlers only read.

The fast thread reads the cheap fields of every GPU each ``interval`` (GPM's activity figures
included, ~0.1 ms per GPU); the slow thread reads NVML's PCIe counter (about 20 ms per call; GPUs
with GPM give PCIe on the fast cadence instead), the energy counter and the error counts every
``slow_interval``, so a slow reading never delays a fast one. Neither ever runs on the tornado event loop.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..nvml import GpuLost, NvmlReader, NvmlUnavailable
from ..nvml.fields import MEMORY_ERROR_FIELDS, SLOW_FIELDS
from ..nvml.processes import ProcessMeta, ProcessTable
from ..nvml.reasons import Problem, problem_of_kind
from .schema.replies import NvmlState  # what the API's `state` says about NVML

if TYPE_CHECKING:
    from .schema.replies import Device, GpuSample, NvmlProblem

# Only in the latest sample: memory error counts change rarely and would dominate the history's size.
LATEST_ONLY = frozenset(name for name, _ in MEMORY_ERROR_FIELDS)
# Processes kept per GPU in each history sample (the largest): memory by notebook over time needs
# them, and a GPU shared by hundreds of processes must not make the history unbounded.
HISTORY_PROCESSES = 32


@dataclass(frozen=True)
class Sample:
    """One reading of every GPU. ``gpus`` holds the reply's GPUs, processes included.

    The JSON forms are encoded once here, on the sampler thread, so that serving ten minutes of
    history to many clients costs the event loop a string join, not an encode per request.
    """

    t: float
    gpus: tuple[GpuSample, ...]
    json_full: str = ""
    json_history: str = ""
    # The history form without process lists, and what they were: a full-history reply sends this
    # form where a sample's lists repeat the sample before it (telemetry.py).
    json_lean: str = ""
    processes_key: str = ""

    @classmethod
    def encode(cls, t: float, gpus: tuple[GpuSample, ...]) -> Sample:
        history = [_history_gpu(gpu) for gpu in gpus]
        lean = [{k: v for k, v in gpu.items() if k != "processes"} for gpu in history]
        return cls(
            t,
            gpus,
            json.dumps({"t": t, "gpus": gpus}),
            json.dumps({"t": t, "gpus": history}),
            json.dumps({"t": t, "gpus": lean}),
            json.dumps([gpu.get("processes") for gpu in history]),
        )


def _history_gpu(gpu: GpuSample) -> GpuSample:
    """A GPU as the history keeps it: no error counts, at most HISTORY_PROCESSES processes."""
    kept = cast("GpuSample", {k: v for k, v in gpu.items() if k not in LATEST_ONLY})  # NotRequired ones
    processes = gpu.get("processes")
    if processes and len(processes) > HISTORY_PROCESSES:
        by_size = sorted(processes, key=lambda p: p["used_memory_bytes"] or 0, reverse=True)
        kept["processes"] = by_size[:HISTORY_PROCESSES]
    return kept


@dataclass
class Status:
    """Whether NVML works: ``state`` for programs, ``reason`` (None when ok) for people.

    ``problem`` is what keeps an unavailable NVML from working, as the one error table names it
    (``nvml.reasons.Problem.kind``).
    """

    state: NvmlState = "starting"
    reason: str | None = "GPU sampling has not started yet."
    system: dict[str, Any] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)
    problem: NvmlProblem = None

    @property
    def available(self) -> bool:
        return self.state == "ok"


def _problem(problem: Problem) -> NvmlProblem:
    """The table's kind, which the schema's nvml_problem lists (test_server_schema checks it)."""
    return cast("NvmlProblem", problem.kind)


class Sampler:
    def __init__(
        self,
        reader_factory: Callable[[], NvmlReader],
        *,
        interval: float,
        slow_interval: float,
        history_seconds: float,
        retry_interval: float,
        verify_pids: bool = True,
        log: logging.Logger | None = None,
    ) -> None:
        self._reader_factory = reader_factory
        self.interval = interval
        self.slow_interval = slow_interval
        self.retry_interval = retry_interval
        self.verify_pids = verify_pids
        self.log = log or logging.getLogger(__name__)
        self._history: deque[Sample] = deque(maxlen=max(1, round(history_seconds / interval)))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._status = Status()
        self._slow: dict[int, tuple[dict[str, Any], dict[str, str]]] = {}
        self._process_meta: dict[int, ProcessMeta] = {}
        self._threads: list[threading.Thread] = []
        self._cpu = {"fast": 0.0, "slow": 0.0}

    # -- read side (any thread, cheap) -------------------------------------------------------

    @property
    def status(self) -> Status:
        with self._lock:
            return self._status

    def latest(self) -> Sample | None:
        with self._lock:
            return self._history[-1] if self._history else None

    def history_ends(self) -> tuple[Sample, Sample, int] | None:
        """The oldest and newest samples and how many there are (None before the first): whether
        the history changed, without copying it."""
        with self._lock:
            return (self._history[0], self._history[-1], len(self._history)) if self._history else None

    def since(self, t: float | None) -> list[Sample]:
        """Samples newer than ``t`` (all of them when ``t`` is None), oldest first."""
        with self._lock:
            if t is None:
                return list(self._history)
            newer: list[Sample] = []
            for sample in reversed(self._history):
                if sample.t <= t:
                    break
                newer.append(sample)
        newer.reverse()
        return newer

    @property
    def cpu_seconds(self) -> float:
        """CPU time both threads spent sampling (for benchmarks)."""
        return sum(self._cpu.values())

    def process_meta(self) -> dict[int, ProcessMeta]:
        with self._lock:
            return self._process_meta

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        for name, target in (("fast", self._run_fast), ("slow", self._run_slow)):
            thread = threading.Thread(target=target, name=f"jupyter_gpu-sampler-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    # -- fast thread ------------------------------------------------------------------------

    def _run_fast(self) -> None:
        reader = self._reader_factory()
        table = ProcessTable(verify=self.verify_pids)
        next_tick = time.monotonic()
        try:
            while not self._stop.is_set():
                started = time.thread_time()
                if not reader.is_open:
                    opened = self._open(reader)
                    wait = self.interval if opened else self.retry_interval
                else:
                    self._sample(reader, table)
                    wait = self.interval
                self._cpu["fast"] += time.thread_time() - started
                next_tick = max(next_tick + wait, time.monotonic())
                self._stop.wait(next_tick - time.monotonic())
        finally:
            reader.close()

    def _open(self, reader: NvmlReader) -> bool:
        try:
            reader.open()
            system = reader.system()
            # each GPU, then its MIG devices; the reader's names are the schema's (test_server_api
            # holds replies to it)
            devices = [cast("Device", {**values, "unsupported": why}) for values, why in reader.devices()]
        except NvmlUnavailable as error:
            self._unusable(reader, error.problem)
            return False
        except GpuLost as error:  # a GPU that cannot be opened has no entry of its own in the table
            self._unusable(reader, problem_of_kind("other", str(error)))
            return False
        with self._lock:
            self._status = Status("ok", None, system, devices)
        migs = sum(1 for device in devices if device["mig"] is not None)
        what = f"{len(devices) - migs} GPU(s)" + (f" and {migs} MIG device(s)" if migs else "")
        self.log.info("jupyter_gpu: sampling %s every %ss", what, self.interval)
        return True

    def _unusable(self, reader: NvmlReader, problem: Problem) -> None:
        reader.close()
        if problem.sentence != self._status.reason:
            self.log.info("jupyter_gpu: no usable GPU: %s", problem.sentence)
        with self._lock:
            self._status = Status("unavailable", problem.sentence, problem=_problem(problem))

    def _sample(self, reader: NvmlReader, table: ProcessTable) -> None:
        gpus = []
        devices = self._status.devices
        try:
            for device in devices:
                gpus.append(self._read_gpu(reader, device))
        except NvmlUnavailable as error:
            self.log.warning("jupyter_gpu: NVML stopped working: %s", error.reason)
            with self._lock:
                self._status = Status("unavailable", error.reason, problem=_problem(error.problem))
            return
        pids = {p["pid"] for gpu in gpus for p in gpu.get("processes") or ()}
        meta = table.lookup(pids)
        sample = Sample.encode(time.time(), tuple(gpus))
        with self._lock:
            self._history.append(sample)
            self._process_meta = meta

    def _read_gpu(self, reader: NvmlReader, device: Device) -> GpuSample:
        index, uuid = device["index"], device.get("uuid")
        try:
            values, unsupported = reader.fast(index)
        except GpuLost as error:
            reader.forget(index)
            return {
                "index": index,
                "uuid": uuid,
                "mig": device["mig"],
                "state": "lost",
                "error": f"GPU {index} is lost: {error}",
                "unsupported": {},
            }
        slow_values, slow_unsupported = self._slow.get(index, ({name: None for name in SLOW_FIELDS}, {}))
        gpu = {
            "index": index,
            "uuid": uuid,
            "mig": device["mig"],
            "state": "ok",
            "error": None,
            **slow_values,
            **values,  # after the slow readings: PCIe from GPM where the GPU has it (reader.slow)
            "power_limit_watts": device.get("power_limit_watts"),
            "unsupported": {**slow_unsupported, **unsupported},
        }
        return cast("GpuSample", gpu)  # the reader's names are the schema's (test_server_api checks)

    # -- slow thread ------------------------------------------------------------------------

    def _run_slow(self) -> None:
        reader = self._reader_factory()
        try:
            while not self._stop.is_set():
                status = self.status
                if not status.available:
                    reader.close()
                    self._stop.wait(self.interval)
                    continue
                started = time.thread_time()
                self._read_slow(reader, status.devices)
                self._cpu["slow"] += time.thread_time() - started
                self._stop.wait(self.slow_interval)
        finally:
            reader.close()

    def _read_slow(self, reader: NvmlReader, devices: list[Device]) -> None:
        try:
            if not reader.is_open:
                reader.open()
            for device in devices:
                if device["mig"] is not None:  # a MIG device has none of these (its fast read says why)
                    continue
                try:
                    self._slow[device["index"]] = reader.slow(device["index"])
                except GpuLost:
                    reader.forget(device["index"])
                    self._slow.pop(device["index"], None)
        except NvmlUnavailable:
            reader.close()  # the fast thread reports the state; this one waits for it to recover
