"""The GPU panel's polls are no user activity (issue #28): JupyterHub's idle culler asks the
server for its last activity (``GET /api/status``), and a forgotten tab polling the panel must not
keep a server, and its GPU, alive."""

from __future__ import annotations

import json

import pytest
from support.jupyter_api import get

ROUTES = ["devices", "telemetry", "kernels", "host", "exits"]


async def last_activity(jp_fetch) -> str:
    status = json.loads((await jp_fetch("api", "status", params={"no_track_activity": "1"})).body)
    return status["last_activity"]


@pytest.mark.parametrize("route", ROUTES)
async def test_polling_a_gpu_route_is_not_activity(jp_fetch, gpu_monitor, route):
    await jp_fetch("api", "contents")  # some activity to start from
    before = await last_activity(jp_fetch)
    for _ in range(3):
        await get(jp_fetch, route)
    assert await last_activity(jp_fetch) == before


async def test_what_the_user_does_still_is(jp_fetch, gpu_monitor):
    """The control: jupyter_server's own routes move it, so the test above can fail."""
    await jp_fetch("api", "contents")
    before = await last_activity(jp_fetch)
    await jp_fetch("api", "kernels")
    assert await last_activity(jp_fetch) > before
