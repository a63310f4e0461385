"""Shape sampler state into the JSON the REST API serves (pure functions).

The shapes are those of ``schema/<route>.schema.json``; the server tests hold every reply to them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

from .sampler import Sample, Status
from .schema import VERSION

if TYPE_CHECKING:
    from .schema.replies import DevicesReply, NvmlProblem, NvmlState, ProcessOwner, Version


class Header(TypedDict):
    """The fields every NVML reply starts with (each route's schema names them from common's
    $defs; a reply built as ``{**header(status), ...}`` is checked against its TypedDict)."""

    version: Version
    available: bool
    state: NvmlState
    problem: NvmlProblem
    reason: str | None


def header(status: Status) -> Header:
    """What every reply starts with: the schema version and NVML's state, as enums and sentence."""
    return {
        "version": VERSION,
        "available": status.available,
        "state": status.state,
        "problem": status.problem,
        "reason": status.reason,
    }


def devices_payload(status: Status, *, simulated: bool) -> DevicesReply:
    return {
        **header(status),
        "simulated": simulated,
        "driver_version": status.system.get("driver_version"),
        "cuda_driver_version": status.system.get("cuda_driver_version"),
        "devices": status.devices,
    }


def telemetry_json(
    status: Status,
    latest: Sample | None,
    history: Iterable[Sample],
    *,
    simulated: bool,
    interval: float,
    now: float,
    owners: list[ProcessOwner],
) -> str:
    """The telemetry response body, assembled from the samples' pre-encoded JSON (the full
    history's is full_history.py's).

    ``owners`` names the notebook of each GPU process the kernel view attributed (owners.py), so
    the charts can stack each GPU's memory by notebook over the whole history.
    """
    fields = telemetry_fields(status, simulated=simulated, interval=interval, now=now, owners=owners)
    history_json = ",".join(sample.json_history for sample in history) if status.available else ""
    latest_json = latest.json_full if latest and status.available else "null"
    return f'{{"history": [{history_json}], "latest": {latest_json}, {fields}'


def telemetry_fields(
    status: Status,
    *,
    simulated: bool,
    interval: float,
    now: float,
    owners: list[ProcessOwner],
) -> str:
    """Every field of the reply but ``history`` and ``latest``, as JSON from after a comma, closing
    brace included (those two go first, so that a full reply can share them: full_history.py)."""
    head = json.dumps(
        {**header(status), "simulated": simulated, "interval": interval, "now": now, "owners": owners}
    )
    return head[1:]
