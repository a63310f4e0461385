"""Explain a CUDA out-of-memory error under its traceback: what was asked, what was free, what
this kernel caches and how fragmented it is, and who else holds that GPU.

A ``post_run_cell`` callback, so that torch is never imported to register it and the original
traceback is shown untouched before the explanation. The error is recognised by its class
(``OutOfMemoryError`` from a ``torch`` module) without importing torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..analysis.alloc_conf import LIMIT_ENV, SOURCE_ENV
from ..analysis.cells import cell_label, holders_now, is_torch_oom
from ..analysis.fragmentation import advise, expandable_segments_configured
from ..analysis.oom_message import parse_oom_message
from ..analysis.units import format_bytes
from ..torch_state import nvml_uuid, torch_in_use
from .timeline import timeline_of

MAX_HOLDERS = 5


def explain(error: BaseException, cells: Sequence[dict[str, Any]] = ()) -> str | None:
    """The explanation for a CUDA OOM; None for other out-of-memory errors (CPU, MPS).

    ``cells`` are this kernel's timeline: the cells that left the most allocated are named.
    """
    from . import gpu_memory  # NVML, psutil, urllib: only when there is something to explain

    message = parse_oom_message(str(error))
    if message is None:
        return None
    on = f" on GPU {message.device}" if message.device is not None else ""
    lines = [f"jupyter_gpu: why CUDA ran out of memory{on}"]
    if message.requested_bytes is not None:
        asked = f"Asked for {format_bytes(message.requested_bytes)}"
        if message.free_bytes is not None:
            asked += f"; the GPU had {format_bytes(message.free_bytes)} free of {format_bytes(message.total_bytes)}"
        lines.append(f"  {asked}.")
    if message.allowed_bytes is not None:
        lines.append(_allowed(message.allowed_bytes, message.process_bytes))
    torch = torch_in_use()
    if torch is None:
        return "\n".join(lines)
    device = message.device if message.device is not None else torch.cuda.current_device()
    figures, _ = gpu_memory.allocator_view(torch, device)
    ratio = f", fragmentation {figures.fragmentation:.0%}" if figures.fragmentation is not None else ""
    lines.append(
        f"  This kernel: {format_bytes(figures.allocated_bytes)} in live tensors, "
        f"{format_bytes(figures.reserved_unallocated_bytes)} cached but unallocated, of which "
        f"{format_bytes(figures.inactive_split_bytes)} is stranded{ratio}."
    )
    on_device = [{**c, "gpus": [g for g in c["gpus"] if g["index"] == device]} for c in cells if c["gpus"]]
    holders = holders_now(on_device, MAX_HOLDERS)
    if holders:
        named = ", ".join(f"cell {cell_label(c)} left {format_bytes(left)}" for c, left in holders)
        lines.append(f"  The cells of this kernel that left the most allocated on this GPU: {named}.")
    uuid = nvml_uuid(torch, device)
    view, reason = (
        (None, "no UUID for this GPU")
        if uuid is None
        else gpu_memory.device_view(uuid, labels=lambda: gpu_memory.server_labels(uuid))
    )
    if view is None:
        lines.append(f"  Other processes: unknown ({reason}).")
    elif not view.others:
        lines.append("  No other process holds memory on this GPU.")
    else:
        lines.append(f"  Other processes hold {format_bytes(view.others_bytes)} of this GPU:")
        for holder in view.others[:MAX_HOLDERS]:
            lines.append(f"    {format_bytes(holder.used_bytes):>12}  {holder.label}")
        if len(view.others) > MAX_HOLDERS:
            lines.append(f"    … and {len(view.others) - MAX_HOLDERS} more")
    advice = advise(
        figures,
        expandable_enabled=expandable_segments_configured(os.environ),
        device_total_bytes=view.total_bytes if view else None,
        other_processes_bytes=view.others_bytes if view else None,
    )
    lines += [f"  - {a.message}" for a in advice if a.kind != "empty_cache"]
    return "\n".join(lines)


def _allowed(allowed: int, in_use: int | None) -> str:
    """What capped the process: this server's quota when it set one, else the process itself."""
    quota = os.environ.get(LIMIT_ENV, "")
    if not quota.isdigit():
        return (
            f"  This process may use only {format_bytes(allowed)} "
            "(torch.cuda.set_per_process_memory_fraction), whatever the GPU has free."
        )
    uses = f"; this kernel uses {format_bytes(in_use)} of it" if in_use is not None else ""
    source = os.environ.get(SOURCE_ENV) or "the Jupyter server"
    return (
        f"  That is the quota of this server's kernels: {format_bytes(int(quota))} each on a GPU, "
        f"set by {source} ({format_bytes(allowed)} as PyTorch counts it){uses}. Free memory in this "
        "kernel (del, torch.cuda.empty_cache()), or ask whoever runs the server for more."
    )


def register(ipython: Any) -> Callable[[], None]:
    def explain_oom(result: Any) -> None:
        error = result.error_in_exec
        if error is None or getattr(result.info, "silent", False) or not is_torch_oom(error):
            return
        try:
            timeline = timeline_of(ipython)
            text = explain(error, timeline.cells() if timeline else ())
        except Exception as failure:  # an explanation must never become a second error
            text = f"(jupyter_gpu could not explain this out-of-memory error: {failure})"
        if text:
            print(text)

    ipython.events.register("post_run_cell", explain_oom)
    return lambda: ipython.events.unregister("post_run_cell", explain_oom)
