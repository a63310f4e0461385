"""``GET api/gpu/kernels/<id>/cells`` over HTTP with a real server and kernel, when the kernel's
timeline file holds the largest records the server takes, written as code in the kernel could
(its own process id, its own file name): every reply is a bounded page, ``since`` and ``limit``
page through all of them once, and a bad parameter is a 400 that says what it wants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cell_records import document, largest_record, write_file
from support.jupyter_api import gpu_reply, start_notebook_kernel

from jupyter_gpu.analysis.cells import MAX_BYTES, MAX_CELLS, cells_file_name
from jupyter_gpu.server.cell_history import PAGE_BYTES

CELLS = 120  # ~6.5 MB of records: several pages
ENVELOPE = 1024  # the reply's fields around its cells


async def _cells(jp_fetch, kernel_id: str, **params: str):
    return await jp_fetch("api", "gpu", "kernels", kernel_id, "cells", params=params, raise_error=False)


async def _hostile_kernel(jp_fetch, jp_serverapp) -> str:
    """A kernel whose timeline file was filled, file after file, with the largest records."""
    kernel_id = await start_notebook_kernel(jp_fetch, "hostile.ipynb")
    manager = jp_serverapp.kernel_manager
    pid = manager.get_kernel(kernel_id).provisioner.pid
    path = Path(manager.connection_dir) / cells_file_name(kernel_id)
    per_file = MAX_BYTES // len(json.dumps(largest_record(0)))
    for first in range(0, CELLS, per_file):
        cells = [largest_record(s) for s in range(first, min(first + per_file, CELLS))]
        write_file(path, document(cells, kernel_id=kernel_id, pid=pid))
        assert (await _cells(jp_fetch, kernel_id, limit="1")).code == 200  # the server reads it
    return kernel_id


async def test_every_reply_is_a_bounded_page_and_the_pages_hold_every_cell_once(jp_fetch, jp_serverapp):
    kernel_id = await _hostile_kernel(jp_fetch, jp_serverapp)
    latest = await gpu_reply(jp_fetch, "kernels", kernel_id, "cells", schema="cells.schema.json")
    seqs = [c["seq"] for c in latest["cells"]]
    assert seqs == list(range(CELLS - len(seqs), CELLS)) and 0 < len(seqs) < CELLS  # the newest
    assert latest["cursor"] == CELLS and latest["more"] is False
    seen: list[int] = []
    cursor, more, pages = 0, True, 0
    while more:
        response = await _cells(jp_fetch, kernel_id, since=str(cursor))
        assert response.code == 200 and len(response.body) <= PAGE_BYTES + ENVELOPE
        page = json.loads(response.body)
        seen += [c["seq"] for c in page["cells"]]
        cursor, more, pages = page["cursor"], page["more"], pages + 1
    assert seen == list(range(CELLS)) and cursor == CELLS and pages > 1
    few = json.loads((await _cells(jp_fetch, kernel_id, since="10", limit="7")).body)
    assert [c["seq"] for c in few["cells"]] == list(range(10, 17)) and few["cursor"] == 17 and few["more"]
    nothing_new = json.loads((await _cells(jp_fetch, kernel_id, since=str(CELLS))).body)
    assert nothing_new["cells"] == [] and nothing_new["cursor"] == CELLS and nothing_new["more"] is False


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "-1"}, "`since` must be the `cursor` of an earlier cells reply; got '-1'."),
        ({"since": "1.5"}, "`since` must be the `cursor` of an earlier cells reply; got '1.5'."),
        ({"since": "\u0663"}, "`since` must be the `cursor` of an earlier cells reply; got '\u0663'."),
        (
            {"since": "9" * 5000},
            "`since` must be the `cursor` of an earlier cells reply; got '" + "9" * 40 + "'.",
        ),
        ({"limit": "0"}, f"`limit` must be a number of cells from 1 to {MAX_CELLS}; got '0'."),
        (
            {"limit": str(MAX_CELLS + 1)},
            f"`limit` must be a number of cells from 1 to {MAX_CELLS}; got '1001'.",
        ),
        ({"limit": "%"}, f"`limit` must be a number of cells from 1 to {MAX_CELLS}; got '%'."),
    ],
    ids=["negative", "fraction", "arabic-indic digit", "5000 digits", "zero", "over 1000", "percent"],
)
async def test_a_bad_since_or_limit_is_a_400_that_says_what_it_wants(jp_fetch, jp_serverapp, params, message):
    kernel_id = await start_notebook_kernel(jp_fetch, "asked.ipynb")
    response = await _cells(jp_fetch, kernel_id, **params)
    assert response.code == 400 and json.loads(response.body)["message"] == message
