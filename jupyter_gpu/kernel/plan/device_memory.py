"""``--device-memory auto``: how much memory a GPU of this kernel has free, asked without
initialising CUDA.

Where the notebook has initialised CUDA, torch says (``mem_get_info`` of the current device, which
then costs nothing more). Before that, NVML (the kernel side's one backend: no CUDA context) for
the GPUs ``CUDA_VISIBLE_DEVICES`` shows, and failing NVML, the Jupyter server's newest reading.
With several GPUs, the least free among the first N: every rank needs its share.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ...client import ServerError, discover
from ...nvml.visible import parse_visible_devices
from ...torch_state import torch_in_use

SERVER_TIMEOUT = 2.0


def _visible(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NVML's rows in CUDA's numbering, as ``CUDA_VISIBLE_DEVICES`` orders them."""
    whole = [r for r in rows if r.get("mig") is None]
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return whole
    tokens, _ = parse_visible_devices(value, [r.get("uuid") for r in whole])
    picked = []
    for token in tokens:
        for row in rows:
            uuid = str(row.get("uuid") or "")
            if (token.isdigit() and row in whole and row.get("index") == int(token)) or (
                not token.isdigit() and uuid.startswith(token)
            ):
                picked.append(row)
                break
    return picked


def _least_free(rows: list[dict[str, Any]], gpus: int) -> int | None:
    free = [r.get("memory_free_bytes") for r in rows[: max(1, gpus)]]
    if not free or not all(isinstance(f, int) for f in free):
        return None
    return min(f for f in free if isinstance(f, int))


def _from_server(gpus: int) -> tuple[int | None, str]:
    servers = discover()
    if not servers:
        return None, "no NVML here and no Jupyter server to ask"
    try:  # `since` in the future: the newest sample without the history
        reply = servers[0].get(f"api/gpu/telemetry?since={time.time() + 3600:.0f}", timeout=SERVER_TIMEOUT)
    except ServerError as exc:
        return None, f"the Jupyter server did not answer ({exc})"
    latest = reply.get("latest") if isinstance(reply.get("latest"), dict) else {}
    rows = [g for g in (latest or {}).get("gpus", []) if isinstance(g, dict) and g.get("state") == "ok"]
    free = _least_free(rows, gpus)
    simulated = " (simulated)" if reply.get("simulated") else ""
    if free is None:
        return None, f"the Jupyter server reports no GPU memory{simulated}"
    return free, f"free on the Jupyter server's GPUs{simulated}, least of {min(len(rows), max(1, gpus))}"


def free_device_memory(gpus: int) -> tuple[int | None, str]:
    """Free bytes per GPU for a plan over ``gpus`` GPUs, and where the figure comes from (or,
    with None, why there is none)."""
    torch = torch_in_use()
    if torch is not None:
        device = torch.cuda.current_device()
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"free on CUDA device {device} now (torch.cuda.mem_get_info)"
    from ..gpu_memory import all_devices

    rows, reason = all_devices()
    if rows:
        visible = _visible(rows)
        free = _least_free(visible, gpus)
        if free is not None:
            return free, f"free now (NVML), least of {min(len(visible), max(1, gpus))} visible GPU(s)"
        return None, "NVML gives no free memory for the GPUs CUDA_VISIBLE_DEVICES shows"
    figure, why = _from_server(gpus)
    return (figure, why) if figure is not None else (None, f"{reason or 'no NVML'}; {why}")
