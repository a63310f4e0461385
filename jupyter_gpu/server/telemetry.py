"""Shape sampler state into the JSON the REST API serves (pure functions)."""
from __future__ import annotations

from typing import Any, Iterable

from .sampler import Sample, Status


def _gpu_without_processes(gpu: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in gpu.items() if key != "processes"}


def sample_json(sample: Sample, *, processes: bool) -> dict[str, Any]:
    """History samples leave out process lists: they change rarely and would dominate the size."""
    gpus = sample.gpus if processes else tuple(_gpu_without_processes(g) for g in sample.gpus)
    return {"t": sample.t, "gpus": list(gpus)}


def header(status: Status, *, simulated: bool) -> dict[str, Any]:
    return {"available": status.available, "reason": status.reason, "simulated": simulated}


def devices_payload(status: Status, *, simulated: bool) -> dict[str, Any]:
    return {
        **header(status, simulated=simulated),
        "driver_version": status.system.get("driver_version"),
        "cuda_driver_version": status.system.get("cuda_driver_version"),
        "devices": status.devices,
    }


def telemetry_payload(
    status: Status,
    latest: Sample | None,
    history: Iterable[Sample],
    *,
    simulated: bool,
    interval: float,
    now: float,
) -> dict[str, Any]:
    return {
        **header(status, simulated=simulated),
        "interval": interval,
        "now": now,
        "latest": sample_json(latest, processes=True) if latest and status.available else None,
        "history": [sample_json(s, processes=False) for s in history] if status.available else [],
    }
