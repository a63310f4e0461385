"""``GET api/gpu/kernels/<id>/cells`` with a real Jupyter server and a real kernel that loads
jupyter_gpu: the cells a user ran, with their numbers, JupyterLab's cell ids and outcomes, kept
while the kernel idles and gone when it is shut down."""

from __future__ import annotations

import json
import os

import pytest
from support.jupyter_api import get_cells, notebook
from support.waiting import wait_for
from tornado.httpclient import HTTPClientError

from jupyter_gpu.analysis.cells import cells_file_name


async def first_cells(jp_fetch, kernel_id: str) -> dict:
    """The reply once the server has the kernel's first cell (the kernel writes within a second)."""

    async def recorded():
        body = await get_cells(jp_fetch, kernel_id)
        return body if body["cells"] else None

    return await wait_for(recorded, timeout=30)


async def test_the_route_lists_each_cell_with_its_number_cell_id_and_outcome(
    jp_fetch, jp_serverapp, kernel_env
):
    async with notebook(jp_fetch, jp_serverapp) as (kernel_id, cells):
        assert (await cells.run("x = 1", "cell-ok")).status == "ok"
        assert (await cells.run("1 / 0", "cell-error")).status == "error"
        slow = "import time\nprint('started', flush=True)\ntime.sleep(60)"
        assert (await cells.run(slow, "cell-slow", interrupt_on="started")).status == "error"
        assert (await cells.run("y = 2")).status == "ok"  # a front end that sends no cell id

        async def four_cells():
            body = await get_cells(jp_fetch, kernel_id)
            return body if len(body["cells"]) == 4 else None

        body = await wait_for(four_cells, timeout=30)
        assert body["kernel_id"] == kernel_id and body["path"] == "course/timeline.ipynb"
        assert body["reason"] is None
        seen = [(c["execution_count"], c["cell_id"], c["outcome"]) for c in body["cells"]]
        assert seen == [
            (2, "cell-ok", "ok"),
            (3, "cell-error", "error"),
            (4, "cell-slow", "interrupted"),
            (5, None, "ok"),
        ]
        assert all(c["gpus"] == [] for c in body["cells"])  # CPU torch or none: no GPU figures
        slow_cell = body["cells"][2]
        assert 0 < slow_cell["wall_seconds"] < 60 and slow_cell["end"] >= slow_cell["start"]


async def test_the_cells_outlive_the_kernels_files_and_go_with_the_kernel(jp_fetch, jp_serverapp, kernel_env):
    async with notebook(jp_fetch, jp_serverapp) as (kernel_id, cells):
        assert (await cells.run("z = 3", "kept")).status == "ok"
        await first_cells(jp_fetch, kernel_id)
        # The kernel idles: its stats file ages, and its timeline file may go (e.g. a cleaned /tmp).
        path = os.path.join(jp_serverapp.runtime_dir, cells_file_name(kernel_id))
        os.unlink(path)
        body = await get_cells(jp_fetch, kernel_id)
        assert [c["cell_id"] for c in body["cells"]] == ["kept"]
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("api", "gpu", "kernels", kernel_id, "cells")
        assert info.value.code == 404
        assert "No kernel with id" in json.loads(info.value.response.body)["message"]


async def test_a_file_claiming_another_kernel_is_ignored(jp_fetch, jp_serverapp, kernel_env):
    """A cells file written for kernel A but placed under kernel B's name adds nothing to B."""
    async with notebook(jp_fetch, jp_serverapp) as (kernel_id, cells):
        assert (await cells.run("a = 1", "real")).status == "ok"
        await first_cells(jp_fetch, kernel_id)
        path = os.path.join(jp_serverapp.runtime_dir, cells_file_name(kernel_id))
        forged = json.loads(open(path, "rb").read())
        forged["kernel_id"] = "someone-elses-kernel"
        forged["cells"][-1].update(seq=99, cell_id="forged")
        with open(path, "w") as handle:
            json.dump(forged, handle)
        body = await get_cells(jp_fetch, kernel_id)
        assert [c["cell_id"] for c in body["cells"]] == ["real"]
        assert "kernel_id does not match" in body["reason"]


async def test_an_unknown_kernel_is_a_404_with_a_message(jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("api", "gpu", "kernels", "no-such-kernel", "cells")
    assert info.value.code == 404
    assert (
        json.loads(info.value.response.body)["message"]
        == "No kernel with id 'no-such-kernel' on this server."
    )
