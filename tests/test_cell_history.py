"""What the server takes from a kernel's timeline file and how it serves it: a file that anyone
running as this user could have written (a notebook's own code, or a planted file) changes
nothing the server holds unless it passes every check, a record is bounded in size, and a reply
is a bounded page of the cells kept, whatever the records hold."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cell_records import KERNEL_ID, document, largest_record, record, write_file

from jupyter_gpu.analysis import cells as cells_module
from jupyter_gpu.analysis.cells import (
    MAX_CELLS,
    MAX_RANKS,
    MAX_RECORD_BYTES,
    MAX_RECORD_GPUS,
    DeviceReading,
    cells_file_name,
    validate,
)
from jupyter_gpu.server.cell_history import NOT_LOADED, PAGE_BYTES, CellHistory

GiB = 1024**3


@pytest.fixture
def runtime(tmp_path) -> Path:
    return tmp_path


def _file(runtime: Path) -> Path:
    return runtime / cells_file_name(KERNEL_ID)


def _seqs(page) -> list[int]:
    return [kept.seq for kept in page.cells]


def _cells(history: CellHistory) -> list[dict]:
    return [json.loads(kept.text) for kept in history.page(KERNEL_ID).cells]


def test_the_server_takes_new_cells_once_and_keeps_them_across_a_restart(runtime):
    history = CellHistory()
    assert history.page(KERNEL_ID).reason == NOT_LOADED and _cells(history) == []
    write_file(_file(runtime), document([record(0), record(1)]))
    history.ingest(runtime, KERNEL_ID, os.getpid())
    write_file(_file(runtime), document([record(0), record(1), record(2)]))
    history.ingest(runtime, KERNEL_ID, os.getpid())
    assert history.page(KERNEL_ID).reason is None
    assert _cells(history) == [{**record(s), "pid": os.getpid()} for s in (0, 1, 2)]
    # The kernel restarts: a new process, counting from 0 again; the earlier cells stay.
    write_file(_file(runtime), document([record(0)], pid=os.getpid() + 1))
    history.ingest(runtime, KERNEL_ID, os.getpid() + 1)
    assert [(c["pid"], c["seq"]) for c in _cells(history)] == [
        *((os.getpid(), s) for s in (0, 1, 2)),
        (os.getpid() + 1, 0),
    ]
    _file(runtime).unlink()  # the kernel idles, or its process is gone: nothing is lost
    history.ingest(runtime, KERNEL_ID, os.getpid() + 1)
    assert len(_cells(history)) == 4
    history.keep_only(set())  # shut down
    assert history.page(KERNEL_ID).reason == NOT_LOADED and _cells(history) == []


def _past_2_53() -> dict:
    cell = largest_record(5)
    cell["gpus"][0]["reserved_change_bytes"] = 10**400
    return cell


def _attacks(runtime: Path) -> dict[str, tuple[Callable[[], object], str]]:
    return {
        "another kernel's cells under this kernel's name": (
            lambda: write_file(_file(runtime), document([record(5)], kernel_id="other-kernel")),
            "kernel_id does not match",
        ),
        "a process that is not the kernel": (
            lambda: write_file(_file(runtime), document([record(5)], pid=os.getpid() + 7)),
            f"written by process {os.getpid() + 7}",
        ),
        "a file others may write": (
            lambda: write_file(_file(runtime), document([record(5)])).chmod(0o666),
            "writable by other users",
        ),
        "a symlink to a file of the attacker's choosing": (
            lambda: _file(runtime).symlink_to(write_file(runtime / "planted.json", document([record(5)]))),
            "is a symlink",
        ),
        "a huge file": (
            lambda: write_file(_file(runtime), b" " * (cells_module.MAX_BYTES + 1)),
            "is larger than",
        ),
        "not JSON": (lambda: write_file(_file(runtime), b'{"version": 1, "cells": [NaN'), "not valid JSON"),
        "numbers past 2**53": (
            lambda: write_file(_file(runtime), document([_past_2_53()])),
            "reserved_change_bytes",
        ),
        "a record with more GPU figures than any node has": (
            lambda: write_file(_file(runtime), document([_one_gpu_too_many(5)])),
            f"more than {MAX_RECORD_GPUS} gpu entries",
        ),
    }


@pytest.mark.parametrize("attack", list(_attacks(Path("/nonexistent"))))
def test_a_planted_or_broken_file_changes_nothing_and_says_why(runtime, attack):
    history = CellHistory()
    write_file(_file(runtime), document([record(0)]))
    history.ingest(runtime, KERNEL_ID, os.getpid())
    _file(runtime).unlink()
    plant, reason = _attacks(runtime)[attack]
    plant()
    history.ingest(runtime, KERNEL_ID, os.getpid())
    page = history.page(KERNEL_ID)
    assert _seqs(page) == [0]
    assert page.reason is not None and reason in page.reason


# -- how large a record may be ----------------------------------------------------------------


def _one_gpu_too_many(seq: int) -> dict:
    cell = largest_record(seq)
    cell["ranks"][0]["gpus"].append({**cell["ranks"][0]["gpus"][0], "index": 0})
    return cell


def test_the_largest_record_the_server_takes_has_a_known_size():
    """Every list full and every string and number at its widest: the server takes it, and its
    JSON (with the pid the reply adds) stays within MAX_RECORD_BYTES; one GPU entry more is
    refused."""
    largest = largest_record(0)
    clean, reason = validate(document([largest]), KERNEL_ID)
    assert reason is None and clean["cells"] == [largest]
    assert len(json.dumps({**largest, "pid": 2**22}, separators=(",", ":"))) <= MAX_RECORD_BYTES
    clean, reason = validate(document([_one_gpu_too_many(0)]), KERNEL_ID)
    assert clean is None and f"more than {MAX_RECORD_GPUS} gpu entries" in reason


def test_the_kernel_never_writes_a_record_the_server_refuses():
    """A %%ddp_launch cell whose ranks report more GPU figures than a record holds: the ranks
    that do not fit are left out of its record, and the record passes the server's checks."""
    after = {i: DeviceReading(i, f"GPU-{i}", GiB, GiB, GiB, 0, None) for i in range(8)}
    rank_gpus = [{**record(0, before={}, after={0: after[0]})["gpus"][0]}] * 2  # two GPUs each
    ranks = [
        {"rank": r, "gpus": [{**g, "index": i} for i, g in enumerate(rank_gpus)]} for r in range(MAX_RANKS)
    ]
    cell = record(0, before={}, after=after, ranks=ranks)
    assert len(cell["ranks"]) == (MAX_RECORD_GPUS - 8) // 2
    clean, reason = validate(document([cell]), KERNEL_ID)
    assert reason is None and clean["cells"] == [cell]


# -- what one reply carries ------------------------------------------------------------------


def _history_of(runtime: Path, records: list[dict]) -> CellHistory:
    """A history that took ``records`` from the kernel's file, as many at a time as the file
    holds (each file assembled from records encoded once, as the kernel's writer does)."""
    history = CellHistory()
    head = json.dumps(document([]))[: -len("[]}")]
    batches: list[list[str]] = [[]]
    size = len(head) + 2
    for cell in records:
        text = json.dumps(cell)
        size += len(text) + 1
        if len(batches[-1]) == MAX_CELLS or size > cells_module.MAX_BYTES:
            batches.append([])
            size = len(head) + 2 + len(text) + 1
        batches[-1].append(text)
    for batch in batches:
        write_file(_file(runtime), f"{head}[{','.join(batch)}]}}".encode())
        history.ingest(runtime, KERNEL_ID, os.getpid())
    return history


def test_pages_follow_the_cursor_and_the_newest_come_without_one(runtime):
    history = _history_of(runtime, [record(s) for s in range(30)])
    latest = history.page(KERNEL_ID, limit=10)
    assert _seqs(latest) == list(range(20, 30)) and latest.cursor == 30 and not latest.more
    first = history.page(KERNEL_ID, since=0, limit=10)
    assert _seqs(first) == list(range(10)) and first.cursor == 10 and first.more
    rest = history.page(KERNEL_ID, since=first.cursor, limit=25)
    assert _seqs(rest) == list(range(10, 30)) and rest.cursor == 30 and not rest.more
    for since in (30, 2**53):  # nothing new; a cursor from nowhere gets the newest position back
        empty = history.page(KERNEL_ID, since=since)
        assert empty.cells == [] and empty.cursor == 30 and not empty.more
    write_file(_file(runtime), document([record(s) for s in range(33)]))
    history.ingest(runtime, KERNEL_ID, os.getpid())
    assert _seqs(history.page(KERNEL_ID, since=rest.cursor)) == [30, 31, 32]


def test_cells_dropped_past_1000_are_skipped_by_an_old_cursor(runtime):
    history = _history_of(runtime, [record(s) for s in range(MAX_CELLS + 200)])
    page = history.page(KERNEL_ID, since=5, limit=3)
    assert _seqs(page) == [200, 201, 202] and page.cursor == 203 and page.more


def test_the_rankings_cover_every_cell_kept_not_only_the_page(runtime):
    reading = lambda n: DeviceReading(0, "GPU-0", n * GiB, n * GiB, n * GiB, 0, None)  # noqa: E731
    cells = [record(0, before={0: reading(0)}, after={0: reading(9)})]  # left 9 GiB, peaked at 9
    cells += [record(s) for s in range(1, 20)]
    history = _history_of(runtime, cells)
    page = history.page(KERNEL_ID, limit=5)
    assert _seqs(page) == list(range(15, 20))
    assert page.most_left == page.highest_peaks == [{"pid": os.getpid(), "seq": 0, "bytes": 9 * GiB}]


def test_a_kernel_full_of_the_largest_records_is_served_in_bounded_pages(runtime):
    """The hostile case: 1,000 of the largest records a kernel's file may carry (over 50 MB).
    Each reply holds at most PAGE_BYTES of cells, and the pages give every cell once, in order."""
    history = _history_of(runtime, [largest_record(s) for s in range(MAX_CELLS)])
    head = {"version": 1, "kernel_id": KERNEL_ID, "path": "a/notebook.ipynb"}
    latest = history.page(KERNEL_ID)
    assert len(latest.json(head)) <= PAGE_BYTES + 1024
    assert 0 < len(latest.cells) < MAX_CELLS and _seqs(latest)[-1] == MAX_CELLS - 1
    seen: list[int] = []
    cursor, more = 0, True
    while more:
        page = history.page(KERNEL_ID, since=cursor)
        assert len(page.json(head)) <= PAGE_BYTES + 1024
        seen += _seqs(page)
        cursor, more = page.cursor, page.more
    assert seen == list(range(MAX_CELLS)) and cursor == MAX_CELLS
