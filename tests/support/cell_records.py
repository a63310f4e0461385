"""Per-cell timeline records for the tests: as the kernel's timeline writes them, the file that
carries them, and the largest record the server takes (what a hostile writer would send)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jupyter_gpu.analysis.bounded import MAX_COUNT
from jupyter_gpu.analysis.cells import CELL_ID, MAX_RANKS, MAX_RECORD_GPUS, cell_record
from jupyter_gpu.analysis.stats_file import MAX_DEVICES

KERNEL_ID = "6f1c3a52-1b7e-4c55-9d1a-3f4b2a9e0c11"
# The longest text each bounded field takes: a 128-character UUID, a 64-character cell id, and
# the widest finite float (whose repr has 23 characters).
LONGEST_UUID = "G" * 128
LONGEST_CELL_ID = "c" * 64
WIDEST_FLOAT = 1.2345678901234567e300


def record(seq: int = 0, **changes: Any) -> dict[str, Any]:
    """A record as ``cell_record`` makes it, of a 0.5 s cell without CUDA unless ``changes`` say."""
    fields: dict[str, Any] = dict(
        seq=seq,
        execution_count=seq + 1,
        cell_id="a1b2c3",
        start=1_700_000_000.0 + seq,
        end=1_700_000_000.5 + seq,
        wall_seconds=0.5,
        error=None,
        before={},
        after={},
    )
    return cell_record(**{**fields, **changes})


def document(cells: list[dict[str, Any]], **changes: Any) -> dict[str, Any]:
    """A timeline file's content: this process's, for ``KERNEL_ID``, unless ``changes`` say."""
    return {"version": 1, "kernel_id": KERNEL_ID, "pid": os.getpid(), "time": 1.0, "cells": cells, **changes}


def _widest_gpu(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": LONGEST_UUID,
        "allocated_bytes": MAX_COUNT,
        "allocated_change_bytes": -MAX_COUNT,
        "peak_allocated_bytes": None,  # one of the two peaks is null in every valid entry
        "peak_at_most_bytes": MAX_COUNT,
        "reserved_change_bytes": -MAX_COUNT,
        "process_change_bytes": -MAX_COUNT,
    }


def largest_record(seq: int) -> dict[str, Any]:
    """The largest record the server takes: every list as long as it may be, every string and
    number as wide; its own GPUs first, then one GPU for each rank in the room that is left."""
    assert CELL_ID.fullmatch(LONGEST_CELL_ID)
    ranks = min(MAX_RANKS, MAX_RECORD_GPUS - MAX_DEVICES)
    return {
        "seq": seq,
        "execution_count": MAX_COUNT,
        "cell_id": LONGEST_CELL_ID,
        "start": WIDEST_FLOAT,
        "end": WIDEST_FLOAT,
        "wall_seconds": WIDEST_FLOAT,
        "outcome": "interrupted",
        "gpus": [_widest_gpu(i) for i in range(MAX_DEVICES)],
        "ranks": [{"rank": MAX_COUNT - r, "gpus": [_widest_gpu(MAX_DEVICES - 1)]} for r in range(ranks)],
    }


def write_file(path: Path, doc: dict[str, Any] | bytes) -> Path:
    """Put a timeline file in place at once (as the kernel's atomic writer does), mode 0600."""
    spare = path.with_name(path.name + ".tmp")
    spare.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    spare.chmod(0o600)
    os.replace(spare, path)
    return path
