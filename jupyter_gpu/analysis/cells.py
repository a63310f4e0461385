"""What each cell did to GPU memory: one record per executed cell, and the file that carries them.

The kernel reads its allocator (and NVML) as a cell starts and as it ends
(``kernel/timeline.py``); ``cell_record`` turns the two readings into the cell's record, and the
kernel writes its last records (``MAX_CELLS``, or as many as fit in ``MAX_BYTES``) to
``jupyter_gpu-cells-<kernel id>.json`` beside its connection file. The server checks that file with ``validate`` (it trusts nothing in it) and
keeps the cells for the kernel's life. Pure functions only, so that all of it tests without a GPU.

Every field of a record is bounded (numbers within ±2**53, a cell id of 64 characters, a GPU
UUID of 128, at most ``MAX_RECORD_GPUS`` GPU figures in all), so that one record, written by
the kernel or by anything else that runs as this user, holds at most ``MAX_RECORD_BYTES`` of
JSON: the server keeps 1,000 of them per kernel, and serves them a bounded page at a time.

A cell's peak: torch keeps one peak per device since the last ``reset_peak_memory_stats()``,
and resetting it would change what ``torch.cuda.max_memory_allocated()`` means in the user's
own code. So it is never reset: a cell that raised the kernel's peak has that peak, exactly; a
cell that stayed below an earlier peak gets ``peak_allocated_bytes: null`` and the bound
``peak_at_most_bytes`` (the kernel's peak before it). The cells that push a GPU to a new high
water, the ones that matter when it fills up, are always exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .bounded import MAX_COUNT, is_int, is_number
from .stats_file import KERNEL_ID, MAX_DEVICES, MAX_PID

VERSION = 1
FILE_PREFIX = "jupyter_gpu-cells-"
# Kept by the kernel and by the server, per kernel.
MAX_CELLS = 1000
# The file's size: the kernel drops its oldest cells to stay below it (~1,000 cells on one GPU,
# ~500 on 8; the server has taken the older ones from earlier writes, and keeps 1,000). json's
# C decoder holds the GIL while it parses, so this also bounds how long the server's event loop
# waits on a file (~25 ms per MiB on a busy 2-core VM).
MAX_BYTES = 1024 * 1024
# nbformat 4.5 cell ids: 1 to 64 of these characters.
CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Ranks of one node whose figures a DDP cell's record keeps (kernel/ddp/args.py allows 64 per node).
MAX_RANKS = 64
# GPU figures one record may hold, its own and its ranks' together: each device of the kernel,
# and one device per rank (a rank that uses several leaves room for fewer ranks).
MAX_RECORD_GPUS = MAX_DEVICES + MAX_RANKS
# What the bounds above allow a record's JSON at most (the server's reply adds its pid):
# ~420 bytes per GPU figure with the longest UUID and numbers (tests/test_cell_history.py).
MAX_RECORD_BYTES = 64 * 1024
# Changes may be negative (a cell that frees memory); bounded like every count.
MAX_CHANGE = MAX_COUNT

T = TypeVar("T")
Outcome = Literal["ok", "error", "oom", "interrupted"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "error", "oom", "interrupted")


@dataclass(frozen=True)
class DeviceReading:
    """One CUDA device of the kernel at one instant: torch's allocator, and NVML for the process.

    ``process_bytes`` counts what the allocator does not (the CUDA context, cuBLAS and NCCL
    workspaces); None when NVML cannot tell (no NVML, another PID namespace).
    """

    index: int
    uuid: str | None
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    ooms: int
    process_bytes: int | None


def cells_file_name(kernel_id: str) -> str:
    """``jupyter_gpu-cells-<id>.json``; raises ValueError for ids that are not plain names."""
    if not KERNEL_ID.fullmatch(kernel_id):
        raise ValueError(f"not a kernel id: {kernel_id!r}")
    return f"{FILE_PREFIX}{kernel_id}.json"


def _zero(after: DeviceReading) -> DeviceReading:
    """A device the cell started using: nothing allocated, no context yet."""
    return DeviceReading(after.index, after.uuid, 0, 0, 0, 0, 0)


def device_change(before: DeviceReading | None, after: DeviceReading) -> dict[str, Any]:
    """One GPU's part of a cell's record (``before`` is None if CUDA started in the cell)."""
    start = before if before is not None else _zero(after)
    raised_peak = after.peak_allocated_bytes > start.peak_allocated_bytes
    process_change = (
        None
        if after.process_bytes is None or start.process_bytes is None
        else after.process_bytes - start.process_bytes
    )
    return {
        "index": after.index,
        "uuid": after.uuid,
        "allocated_bytes": after.allocated_bytes,
        "allocated_change_bytes": after.allocated_bytes - start.allocated_bytes,
        "peak_allocated_bytes": after.peak_allocated_bytes if raised_peak else None,
        # If the user reset the peak in the cell, torch's peak now may be lower than before it.
        "peak_at_most_bytes": None
        if raised_peak
        else max(start.peak_allocated_bytes, after.peak_allocated_bytes),
        "reserved_change_bytes": after.reserved_bytes - start.reserved_bytes,
        "process_change_bytes": process_change,
    }


def is_torch_oom(error: BaseException) -> bool:
    """torch's ``OutOfMemoryError``, recognised by class without importing torch."""
    return any(
        cls.__name__ == "OutOfMemoryError" and cls.__module__.split(".")[0] == "torch"
        for cls in type(error).__mro__
    )


def outcome(error: BaseException | None, ooms_rose: bool) -> Outcome:
    """How the cell ended, as a user would say it."""
    if error is None:
        return "ok"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if is_torch_oom(error) or ooms_rose:
        return "oom"
    return "error"


def cell_record(
    *,
    seq: int,
    execution_count: int | None,
    cell_id: str | None,
    start: float,
    end: float,
    wall_seconds: float,
    error: BaseException | None,
    before: dict[int, DeviceReading],
    after: dict[int, DeviceReading],
    ranks: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The record of one cell. ``before``/``after`` map device index to reading; both are empty
    when the cell ran without CUDA, and then the record has no GPU figures. ``ranks``: for a
    DDP cell, ``{"rank", "gpus"}`` per rank, each rank's own ``device_change`` figures; the
    ranks past ``MAX_RANKS`` or ``MAX_RECORD_GPUS`` are left out, so the server takes the record."""
    ooms_rose = any(r.ooms > (before[i].ooms if i in before else 0) for i, r in after.items())
    gpus = [device_change(before.get(i), after[i]) for i in sorted(after)]
    room, kept = MAX_RECORD_GPUS - len(gpus), []
    for rank in ranks[:MAX_RANKS]:
        room -= len(rank["gpus"])
        if room < 0:
            break
        kept.append(rank)
    return {
        "seq": seq,
        "execution_count": execution_count,
        "cell_id": cell_id if cell_id is not None and CELL_ID.fullmatch(cell_id) else None,
        "start": start,
        "end": end,
        "wall_seconds": wall_seconds,
        "outcome": outcome(error, ooms_rose),
        "gpus": gpus,
        "ranks": kept,
    }


# -- what the server reads back ------------------------------------------------------------


def _nullable_int(value: Any, low: int, high: int) -> bool:
    return value is None or is_int(value, low, high)


_GPU_FIELDS: tuple[tuple[str, int, int, bool], ...] = (
    # name, low, high, nullable
    ("allocated_bytes", 0, MAX_COUNT, False),
    ("allocated_change_bytes", -MAX_CHANGE, MAX_CHANGE, False),
    ("peak_allocated_bytes", 0, MAX_COUNT, True),
    ("peak_at_most_bytes", 0, MAX_COUNT, True),
    ("reserved_change_bytes", -MAX_CHANGE, MAX_CHANGE, False),
    ("process_change_bytes", -MAX_CHANGE, MAX_CHANGE, True),
)


def _gpu(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if not isinstance(raw, dict):
        return None, "a gpu entry is not an object"
    if not is_int(raw.get("index"), 0, MAX_DEVICES - 1):
        return None, f"a gpu index is not an integer from 0 to {MAX_DEVICES - 1}"
    uuid = raw.get("uuid")
    if uuid is not None and not (isinstance(uuid, str) and len(uuid) <= 128):
        return None, "a gpu uuid is not a short string"
    out: dict[str, Any] = {"index": raw["index"], "uuid": uuid}
    for name, low, high, nullable in _GPU_FIELDS:
        value = raw.get(name)
        if not (_nullable_int(value, low, high) if nullable else is_int(value, low, high)):
            return None, f"{name} is not an integer within ±2**53"
        out[name] = value
    if (out["peak_allocated_bytes"] is None) == (out["peak_at_most_bytes"] is None):
        return None, "a gpu entry needs exactly one of peak_allocated_bytes and peak_at_most_bytes"
    return out, None


def _gpus(raw: Any) -> tuple[list[dict[str, Any]] | None, str | None]:
    if not isinstance(raw, list) or len(raw) > MAX_DEVICES:
        return None, f"gpus is not a list of at most {MAX_DEVICES} entries"
    clean: list[dict[str, Any]] = []
    indices: set[int] = set()
    for entry in raw:
        gpu, reason = _gpu(entry)
        if gpu is None:
            return None, reason
        if gpu["index"] in indices:
            return None, f"gpu {gpu['index']} is listed twice in a cell"
        indices.add(gpu["index"])
        clean.append(gpu)
    return clean, None


def _cell(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    if not isinstance(raw, dict):
        return None, "a cell is not an object"
    if not is_int(raw.get("seq"), 0, MAX_COUNT):
        return None, "seq is not a non-negative integer"
    if not _nullable_int(raw.get("execution_count"), 0, MAX_COUNT):
        return None, "execution_count is not a non-negative integer or null"
    cell_id = raw.get("cell_id")
    if cell_id is not None and not (isinstance(cell_id, str) and CELL_ID.fullmatch(cell_id)):
        return None, "cell_id is not a cell id (1 to 64 letters, digits, '-' or '_')"
    for name in ("start", "end", "wall_seconds"):
        if not is_number(raw.get(name), 0):
            return None, f"{name} is not a finite non-negative number"
    if raw["end"] < raw["start"]:
        return None, "a cell ends before it starts"
    if raw.get("outcome") not in OUTCOMES:
        return None, f"outcome is not one of {', '.join(OUTCOMES)}"
    gpus, reason = _gpus(raw.get("gpus"))
    if gpus is None:
        return None, reason
    ranks = raw.get("ranks", [])
    if not isinstance(ranks, list) or len(ranks) > MAX_RANKS:
        return None, f"ranks is not a list of at most {MAX_RANKS} entries"
    clean_ranks: list[dict[str, Any]] = []
    numbers: set[int] = set()
    room = MAX_RECORD_GPUS - len(gpus)
    for entry in ranks:
        if not isinstance(entry, dict) or not is_int(entry.get("rank"), 0, MAX_COUNT):
            return None, "a rank entry has no rank number"
        if entry["rank"] in numbers:
            return None, f"rank {entry['rank']} is listed twice in a cell"
        numbers.add(entry["rank"])
        rank_gpus, reason = _gpus(entry.get("gpus"))
        if rank_gpus is None:
            return None, reason
        room -= len(rank_gpus)
        if room < 0:
            return None, f"a cell holds more than {MAX_RECORD_GPUS} gpu entries, its own and its ranks'"
        clean_ranks.append({"rank": entry["rank"], "gpus": rank_gpus})
    return {
        "seq": raw["seq"],
        "execution_count": raw["execution_count"],
        "cell_id": cell_id,
        "start": raw["start"],
        "end": raw["end"],
        "wall_seconds": raw["wall_seconds"],
        "outcome": raw["outcome"],
        "gpus": gpus,
        "ranks": clean_ranks,
    }, None


def validate(doc: Any, kernel_id: str) -> tuple[dict[str, Any] | None, str | None]:
    """A clean copy of a parsed cells file (only known fields, cells in ``seq`` order), or None
    and the reason it was refused."""
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        return None, f"unsupported version {doc.get('version')!r}"
    if doc.get("kernel_id") != kernel_id:
        return None, "kernel_id does not match the file name"
    if not is_int(doc.get("pid"), 1, MAX_PID):
        return None, f"pid is not an integer from 1 to {MAX_PID}"
    running, why = _running(doc.get("running"))
    if why is not None:
        return None, why
    cells = doc.get("cells")
    if not isinstance(cells, list) or len(cells) > MAX_CELLS:
        return None, f"cells is not a list of at most {MAX_CELLS} entries"
    clean: list[dict[str, Any]] = []
    for raw in cells:
        cell, reason = _cell(raw)
        if cell is None:
            return None, reason
        if clean and cell["seq"] <= clean[-1]["seq"]:
            return None, "cells are not in increasing seq order"
        clean.append(cell)
    return {
        "version": VERSION,
        "kernel_id": kernel_id,
        "pid": doc["pid"],
        "running": running,
        "cells": clean,
    }, None


def _running(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The cell running as the file was written (absent or null between cells), or why not."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, "running is not an object"
    count, cell_id, start = raw.get("execution_count"), raw.get("cell_id"), raw.get("start")
    if count is not None and not is_int(count, 0, MAX_COUNT):
        return None, "running's execution_count is not an integer from 0 to 2**53"
    if cell_id is not None and not (isinstance(cell_id, str) and CELL_ID.fullmatch(cell_id)):
        return None, "running's cell_id is not a cell id"
    if not is_number(start):
        return None, "running's start is not a finite number"
    return {"execution_count": count, "cell_id": cell_id, "start": start}, None


# -- what users read -------------------------------------------------------------------------


def left_bytes(cell: dict[str, Any]) -> int:
    """What the cell left allocated as it ended, summed over its GPUs (negative: it freed)."""
    return sum(g["allocated_change_bytes"] for g in cell["gpus"])


def exact_peak(cell: dict[str, Any]) -> int | None:
    """The cell's highest exact peak over its GPUs; None when it raised no GPU's peak."""
    return max(
        (g["peak_allocated_bytes"] for g in cell["gpus"] if g["peak_allocated_bytes"] is not None),
        default=None,
    )


def top(scored: Iterable[tuple[T, int | None]], limit: int = 5) -> list[tuple[T, int]]:
    """The items with the highest positive figures, highest first (the earlier first among equals)."""
    ranked = [(item, figure) for item, figure in scored if figure is not None and figure > 0]
    return sorted(ranked, key=lambda pair: -pair[1])[:limit]


def holders_now(cells: list[dict[str, Any]], limit: int = 5) -> list[tuple[dict[str, Any], int]]:
    """The cells that left the most memory allocated, largest first: (cell, bytes left summed
    over its GPUs). What a cell left may since have been freed by a later cell; this is what
    each one added as it ended, the best the allocator's totals can say without tracing."""
    return top(((c, left_bytes(c)) for c in cells), limit)


def largest_peaks(cells: list[dict[str, Any]], limit: int = 5) -> list[tuple[dict[str, Any], int]]:
    """The cells with the highest exact peaks (on any of their GPUs), highest first."""
    return top(((c, exact_peak(c)) for c in cells), limit)


def cell_label(cell: dict[str, Any]) -> str:
    """``[7]`` as the notebook shows it; ``[?]`` for a cell run without a count."""
    count = cell.get("execution_count")
    return f"[{count}]" if count is not None else "[?]"
