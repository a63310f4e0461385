"""What the Jupyter server's GPM samples say a profiled cell's GPUs did (``%%gpu_profile``).

The server samples every GPU each ``interval``; after the cell, the magic asks it, through the
one client, for the samples since the cell began and keeps those of the GPUs the cell used
(``analysis.profile_activity`` does the reading). Nothing here initialises CUDA: a kernel whose
CUDA is not initialised used no GPU. No server, a server that does not answer in time, one
without GPM: no figures, and the profile is shown without them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..analysis.profile_activity import CellActivity, cell_activity
from ..client import ServerError, discover
from ..torch_state import nvml_uuid, torch_in_use

TIMEOUT = 2.0
# A sample is stamped, encoded (a few ms; more while the server is busy) and then kept: asking
# this long after the cell's end finds every sample stamped before it. The sample after the end
# is not waited for: it straddles the end, and only samples the cell ran all of count.
SETTLE = 0.2


def cell_devices(traced: Iterable[int]) -> dict[int, str]:
    """torch's index -> NVML UUID of the GPUs the cell used: those the trace saw work on, else
    torch's current device; none before the user's code initialised CUDA."""
    torch = torch_in_use()
    if torch is None:
        return {}
    try:
        indices = sorted(set(traced)) or [torch.cuda.current_device()]
    except RuntimeError:
        return {}
    found = {index: nvml_uuid(torch, index) for index in indices}
    return {index: uuid for index, uuid in found.items() if uuid is not None}


def read_activity(start: float, end: float, traced: Iterable[int]) -> CellActivity | None:
    """The server's figures for the cell's window ``[start, end]`` (unix seconds), or None."""
    devices = cell_devices(traced)
    if not devices:
        return None
    servers = discover()
    if not servers:
        return None
    time.sleep(max(0.0, end + SETTLE - time.time()))
    try:
        reply = servers[0].get(f"api/gpu/telemetry?since={start:.3f}", timeout=TIMEOUT)
    except ServerError:
        return None
    return cell_activity(reply, start, end, devices)
