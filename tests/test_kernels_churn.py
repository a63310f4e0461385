"""Kernels that start, restart, die and shut down while the panel polls: every GPU route keeps
answering (never a 500), a kernel caught while it starts is listed as starting, and the server's
memory stays flat. A real jupyter_server and real kernels."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
from collections import Counter
from typing import Any

import psutil
import pytest
from support.jupyter_api import gpu_reply, start_notebook_kernel
from support.kernel_client import CellRunner
from support.waiting import wait_for
from traitlets import TraitError

from jupyter_gpu.server.cell_history import NOT_LOADED

CYCLES = 10
# The server's memory may grow this much from the third cycle to the last (~2 MiB measured: what
# jupyter_server keeps, and pytest's capture of the warnings logged): not a kernel's worth a cycle.
RSS_GROWTH_BYTES = 10 * 1024**2
GETS = (("api", "gpu", "devices"), ("api", "gpu", "telemetry"), ("api", "gpu", "kernels"), ("metrics",))
# Between two rounds of one tab's polls: its pace (the panel's is 2 s), not a wait for anything.
# Faster, and the test's own kernel clients, on the server's event loop, would miss their replies.
POLL_PACE = 0.1


@pytest.fixture
def gpu_monitor_config(gpu_monitor_config: dict) -> dict:
    """The GPU culler on, checking often: it walks the kernels too (it culls none here: nothing
    it sees holds GPU memory). A short history, full before memory is first measured."""
    return {**gpu_monitor_config, "cull_idle_after": 3600.0, "cull_interval": 0.2, "history_seconds": 5.0}


async def _answer(jp_fetch, *parts: str, method: str = "GET") -> Any:
    """The response to one request, errors included."""
    return await jp_fetch(*parts, method=method, body="" if method == "POST" else None, raise_error=False)


async def test_a_kernel_caught_while_it_starts_is_listed_as_starting(jp_fetch, jp_serverapp, monkeypatch):
    """jupyter_server lists a kernel as soon as its process has started, a moment before it sets
    the kernel's last activity; its own kernel_model raises until then. The start is held there."""
    manager = jp_serverapp.kernel_manager
    listed, release = asyncio.Event(), asyncio.Event()
    add = manager._add_kernel_when_ready

    async def add_then_hold(kernel_id: str, km: Any, starter: Any) -> None:
        await add(kernel_id, km, starter)
        listed.set()
        await release.wait()

    monkeypatch.setattr(manager, "_add_kernel_when_ready", add_then_hold)
    body = json.dumps({"name": "python3"})
    start = asyncio.ensure_future(jp_fetch("api", "kernels", method="POST", body=body))
    try:
        await asyncio.wait_for(listed.wait(), 60)
        (kernel_id,) = manager.list_kernel_ids()
        with pytest.raises(TraitError):  # the state the kernels route answered 500 in
            manager.kernel_model(kernel_id)

        reply = await gpu_reply(jp_fetch, "kernels", schema="kernels.schema.json")
        (kernel,) = reply["kernels"]
        assert kernel["id"] == kernel_id and kernel["execution_state"] == "starting"
        assert kernel["last_activity"] is None and kernel["idle_seconds"] is None
        assert kernel["pid"] == manager.get_kernel(kernel_id).provisioner.pid
        cells = await gpu_reply(jp_fetch, "kernels", kernel_id, "cells", schema="cells.schema.json")
        assert cells["cells"] == [] and cells["reason"] == NOT_LOADED
        assert (await _answer(jp_fetch, "metrics")).code == 200
        # Refused with a reason (jupyter_gpu is not loaded in it), as for any kernel without it.
        freed = await _answer(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache", method="POST")
        assert freed.code == 409
    finally:
        release.set()
        await start
    started = (await gpu_reply(jp_fetch, "kernels", schema="kernels.schema.json"))["kernels"][0]
    assert started["last_activity"] is not None


async def test_a_free_cache_click_leaves_the_kernels_other_clients_connected(
    jp_fetch, jp_serverapp, kernel_env
):
    """The action's client has a session of its own. One made with the kernel manager's session
    has the zmq identity of every other such client in the server (here a front end's, as a
    server-side execution would have), the kernel's shell answers only the first to connect, and
    the click waited its 10 s for nothing."""
    kernel_id = await start_notebook_kernel(jp_fetch, "clicked.ipynb")
    async with CellRunner(jp_serverapp.kernel_manager.get_kernel(kernel_id)) as cells:
        assert (await cells.run("%load_ext jupyter_gpu")).ok
        kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)

        async def idle() -> bool | None:  # the server hears the kernel's idle status a little later
            return kernel.execution_state == "idle" or None

        await wait_for(idle, 30, what="the server to see the kernel idle")
        freed = await _answer(jp_fetch, "api", "gpu", "kernels", kernel_id, "free-cache", method="POST")
        assert freed.code == 200 and json.loads(freed.body)["freed_bytes"] == 0  # no CUDA here
        assert (await asyncio.wait_for(cells.run("1 + 1"), 30)).ok


class Poller:
    """The panel's requests, from several tabs at once: every GPU route and the cells of every
    kernel the last kernels reply listed; and a user's free-cache clicks, when told."""

    def __init__(self, jp_fetch) -> None:
        self.jp_fetch = jp_fetch
        self.answers: Counter[tuple[str, int]] = Counter()
        self.kernel_ids: list[str] = []
        self.rounds = 0
        self.stop = asyncio.Event()
        self.clicks: list[asyncio.Future] = []

    async def poll(self) -> None:
        while not self.stop.is_set():
            for parts in GETS:
                await self._note(parts[-1], parts)
            for kernel_id in list(self.kernel_ids):
                await self._note("cells", ("api", "gpu", "kernels", kernel_id, "cells"))
            self.rounds += 1
            await asyncio.sleep(POLL_PACE)

    def free_cache(self, kernel_id: str) -> None:
        """A click on the kernel's free-cache button, answered whenever it is."""
        parts = ("api", "gpu", "kernels", kernel_id, "free-cache")
        self.clicks.append(asyncio.ensure_future(self._note("free-cache", parts, "POST")))

    async def _note(self, route: str, parts: tuple[str, ...], method: str = "GET") -> None:
        response = await _answer(self.jp_fetch, *parts, method=method)
        self.answers[(route, response.code)] += 1
        if route == "kernels" and response.code == 200:
            self.kernel_ids = [k["id"] for k in json.loads(response.body)["kernels"]]

    async def rounds_pass(self, n: int) -> None:
        """Until the pollers have gone round ``n`` more times (each round asks every route)."""
        target = self.rounds + n

        async def passed() -> bool:
            return self.rounds >= target or self.stop.is_set()

        await wait_for(passed, 60, what=f"{n} rounds of polls")


class _Warnings(logging.Handler):
    """What the extension logs at WARNING and above: its periodic refresh and culler log there
    when a pass fails, and answer nothing."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _server_rss() -> int:
    """The server runs in this process (pytest-jupyter); what it holds after a full collection."""
    gc.collect()
    return psutil.Process().memory_info().rss


async def _session(jp_fetch, cycle: int) -> tuple[str, str]:
    body = json.dumps(
        {"path": f"soak/{cycle}.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}}
    )
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=body)).body)
    return session["id"], session["kernel"]["id"]


async def _one_life(jp_fetch, manager, poller: Poller, cycle: int) -> str:
    """A notebook's kernel: it starts, runs a cell or two, then restarts, dies or neither, and
    goes. Its id."""
    session_id, kernel_id = await _session(jp_fetch, cycle)
    poller.free_cache(kernel_id)  # while it is new
    kernel = manager.get_kernel(kernel_id)
    async with CellRunner(kernel) as cells:
        if cycle % 2 == 0:  # its timeline file and stats file for the routes to read
            assert (await cells.run("%load_ext jupyter_gpu")).ok
        assert (await cells.run("x = sum(range(1000))")).ok
    await poller.rounds_pass(1)
    if cycle % 3 == 1:
        assert (await _answer(jp_fetch, "api", "kernels", kernel_id, "restart", method="POST")).code == 200
        await poller.rounds_pass(1)
    elif cycle % 3 == 2:
        os.kill(kernel.provisioner.pid, signal.SIGKILL)  # dies; jupyter_server restarts it, or not yet
        poller.free_cache(kernel_id)
        await poller.rounds_pass(2)
    poller.free_cache(kernel_id)  # as it goes
    if cycle % 2:
        gone = await _answer(jp_fetch, "api", "sessions", session_id, method="DELETE")
    else:
        gone = await _answer(jp_fetch, "api", "kernels", kernel_id, method="DELETE")  # and its session
    assert gone.code in (204, 404)  # 404: a killed kernel that jupyter_server could not restart
    await poller.rounds_pass(1)
    return kernel_id


async def test_kernels_coming_and_going_never_make_a_route_fail(
    jp_fetch, jp_serverapp, gpu_monitor, kernel_env
):
    manager = jp_serverapp.kernel_manager
    warnings = _Warnings()
    gpu_monitor.log.addHandler(warnings)
    level = jp_serverapp.log.level
    jp_serverapp.log.setLevel(logging.INFO)  # no debug line per request for pytest to keep
    poller = Poller(jp_fetch)
    tasks = [asyncio.ensure_future(poller.poll()) for _ in range(3)]
    try:
        rss: list[int] = []
        gone: list[str] = []
        for cycle in range(CYCLES):
            gone.append(await _one_life(jp_fetch, manager, poller, cycle))
            rss.append(_server_rss())
    finally:
        poller.stop.set()
        await asyncio.gather(*tasks, *poller.clicks)
        gpu_monitor.log.removeHandler(warnings)
        jp_serverapp.log.setLevel(level)

    codes = {route: sorted({c for r, c in poller.answers if r == route}) for route, _ in poller.answers}
    assert {route: codes[route] for route in ("devices", "telemetry", "kernels", "metrics")} == {
        "devices": [200],
        "telemetry": [200],
        "kernels": [200],
        "metrics": [200],
    }, poller.answers
    assert set(codes["cells"]) <= {200, 404} and 200 in codes["cells"], poller.answers  # 404: gone
    assert set(codes["free-cache"]) <= {200, 404, 409}, poller.answers  # 409: busy, starting, dying
    failed = [w for w in warnings.messages if w.startswith(("jupyter_gpu:", "jupyter_gpu culler:"))]
    assert failed == []  # no refresh or culler pass failed, and no kernel was culled
    assert rss[-1] - rss[2] < RSS_GROWTH_BYTES, [f"{r / 2**20:.0f} MiB" for r in rss]
    # Nothing is kept for the kernels that went.
    await gpu_monitor.kernels.refresh()
    history = gpu_monitor.kernels.cell_history
    assert all(history.page(kernel_id).reason == NOT_LOADED for kernel_id in gone)
