"""Stats files are written by code the server does not control: a notebook's own code, a
package it installed, or another user where the runtime dir is shared. Whatever a file holds,
the kernels API and jupyter_server's /metrics keep answering, and only that kernel loses its
allocator figures, with the reason in the API."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.jupyter_api import get, start_notebook_kernel
from support.stats_files import fixture_device, publish, stats_doc
from support.waiting import wait_for

from jupyter_gpu.analysis.stats_file import file_name

UUID0 = "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5"


async def kernels_and_metrics(jp_fetch) -> tuple[dict[str, dict], str]:
    """The kernels API (which also refreshes what Prometheus reports), then a scrape."""
    await wait_for(lambda: get(jp_fetch, "telemetry"))
    body = await get(jp_fetch, "kernels")
    response = await jp_fetch("metrics")
    assert response.code == 200
    return {k["id"]: k for k in body["kernels"]}, response.body.decode()


def allocator_series(metrics: str, kernel_id: str) -> list[str]:
    return [
        line
        for line in metrics.splitlines()
        if line.startswith("jupyter_gpu_kernel_allocator_") and f'kernel_id="{kernel_id}"' in line
    ]


async def test_absurd_numbers_cost_only_their_own_kernel(jp_fetch, gpu_monitor):
    """10**400 bytes once made prometheus_client raise OverflowError: /metrics answered 500."""
    good = await start_notebook_kernel(jp_fetch, "good.ipynb")
    publish(gpu_monitor, good, stats_doc(gpu_monitor, good, [fixture_device()]))
    absurd = {"allocated_bytes": 10**400, "fragmentation": 10**400, "num_ooms": 2**64}
    bad = {}
    for field, value in absurd.items():
        bad[field] = await start_notebook_kernel(jp_fetch, f"{field}.ipynb")
        publish(
            gpu_monitor, bad[field], stats_doc(gpu_monitor, bad[field], [{**fixture_device(), field: value}])
        )

    kernels, metrics = await kernels_and_metrics(jp_fetch)
    assert kernels[good]["allocator_state"] == "ok" and kernels[good]["allocator_reason"] is None
    assert kernels[good]["allocator"]["devices"][0]["allocated_bytes"] == fixture_device()["allocated_bytes"]
    assert any(
        line.startswith("jupyter_gpu_kernel_allocator_allocated_bytes{") and f'uuid="{UUID0}"' in line
        for line in allocator_series(metrics, good)
    )
    for field, kernel_id in bad.items():
        assert kernels[kernel_id]["allocator"] is None
        assert kernels[kernel_id]["allocator_state"] == "malformed"
        assert field in kernels[kernel_id]["allocator_reason"]
        assert allocator_series(metrics, kernel_id) == []


async def test_a_device_listed_twice_is_refused(jp_fetch, gpu_monitor):
    """Two series with the same labels make Prometheus reject the whole scrape."""
    twice = await start_notebook_kernel(jp_fetch, "twice.ipynb")
    publish(gpu_monitor, twice, stats_doc(gpu_monitor, twice, [fixture_device(), fixture_device()]))
    kernels, metrics = await kernels_and_metrics(jp_fetch)
    assert kernels[twice]["allocator"] is None and kernels[twice]["allocator_state"] == "malformed"
    assert kernels[twice]["allocator_reason"] == "stats file is malformed: device 0 is listed twice"
    assert allocator_series(metrics, twice) == []
    series = [line.rsplit(" ", 1)[0] for line in metrics.splitlines() if line and not line.startswith("#")]
    assert len(series) == len(set(series))


async def test_planted_files_are_ignored(jp_fetch, gpu_monitor, tmp_path):
    """A symlink, or a file of another user, under a kernel's stats file name."""
    linked = await start_notebook_kernel(jp_fetch, "linked.ipynb")
    target = publish(
        gpu_monitor, linked, stats_doc(gpu_monitor, linked, [fixture_device()]), tmp_path / "elsewhere.json"
    )
    (Path(gpu_monitor.serverapp.kernel_manager.connection_dir) / file_name(linked)).symlink_to(target)
    foreign = None
    if os.geteuid() == 0:  # only root can give a file away
        foreign = await start_notebook_kernel(jp_fetch, "foreign.ipynb")
        os.chown(
            publish(gpu_monitor, foreign, stats_doc(gpu_monitor, foreign, [fixture_device()])), 65534, 65534
        )

    kernels, metrics = await kernels_and_metrics(jp_fetch)
    assert kernels[linked]["allocator"] is None and kernels[linked]["allocator_state"] == "refused"
    assert kernels[linked]["allocator_reason"] == "stats file is a symlink"
    assert allocator_series(metrics, linked) == []
    if foreign is None:
        pytest.skip("the file of another user needs root to be made")
    assert kernels[foreign]["allocator"] is None and kernels[foreign]["allocator_state"] == "refused"
    assert kernels[foreign]["allocator_reason"] == "a file of another user holds this kernel's name"
    assert allocator_series(metrics, foreign) == []
