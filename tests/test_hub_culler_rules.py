"""The Hub culler's rules on their own (a stand-in Hub and clock): never a server it cannot read,
never one with a busy kernel, always a warning first (told to the student's server too), a failing
stop does not end the pass, and a notice that fails stops nothing and delays no stop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from jupyter_gpu.hub.fleet import HubError
from jupyter_gpu.hub.replies import Listed
from jupyter_gpu.hub.server_culler import BY, ServerCuller
from jupyter_gpu.hub.view import Reading, UserServer

IDLE_AFTER, WARN = 100.0, 10.0


class StandInHub:
    def __init__(
        self, readings: list[Reading], refuse: set[str] = frozenset(), deaf: Exception | None = None
    ) -> None:
        self.readings, self.refuse, self.stopped = readings, refuse, []
        self.deaf = deaf  # what notify_stop raises, if anything
        self.told: list[tuple[str, float, str, str]] = []
        self.terminals: dict[str, float | HubError] = {}  # per user: idle seconds, or unreadable
        self.asked_terminals: list[str] = []

    async def read_all(self) -> list[Reading]:
        return self.readings

    async def stop_server(self, server: UserServer) -> None:
        if server.user in self.refuse:
            raise HubError(f"the Hub has no users/{server.user}/server", 404)
        self.stopped.append(server.user)

    async def terminals_idle(self, server: UserServer) -> float | None:
        self.asked_terminals.append(server.user)
        idle = self.terminals.get(server.user)
        if isinstance(idle, HubError):
            raise idle
        return idle

    async def notify_stop(self, server: UserServer, stop_in: float, reason: str, by: str) -> None:
        if self.deaf is not None:
            raise self.deaf
        self.told.append((server.user, stop_in, reason, by))


def reading(user: str, state: str = "ok", idle: float | None = 500.0) -> Reading:
    kernels = Listed([{"id": "k", "idle_seconds": idle}], 1) if state == "ok" else None
    return Reading(
        UserServer(user, "", f"/user/{user}/"), state, None if state == "ok" else "timeout", kernels
    )


def passes(culler: ServerCuller, clock: list[float], *times: float) -> None:
    for t in times:
        clock[0] = t
        asyncio.run(culler.check())


def test_unreadable_and_busy_servers_are_never_stopped_and_a_stop_is_always_warned():
    hub = StandInHub([reading("idle"), reading("busy", idle=None), reading("dead", state="not_answering")])
    clock = [0.0]
    culler = ServerCuller(hub, IDLE_AFTER, WARN, clock=lambda: clock[0])  # type: ignore[arg-type]
    passes(culler, clock, 0.0)  # first seen long past the limit: warned, not stopped
    assert hub.stopped == [] and [n["user"] for n in culler.notes] == ["idle"]
    passes(culler, clock, WARN - 1)
    assert hub.stopped == []
    passes(culler, clock, WARN, 10 * IDLE_AFTER)
    assert hub.stopped == ["idle"]  # once; busy and dead stay
    # the student heard each warning the page shows, with its time and reason
    warnings = [n for n in culler.notes if n["action"] == "warn"]
    assert hub.told == [("idle", WARN, "every kernel idle for at least 8 min", BY)] * len(warnings)


@pytest.mark.parametrize(
    "deaf",
    [
        HubError("alice's server has no notices route (gone, or an older jupyter_gpu)", 404),
        RuntimeError("bug"),
    ],
    ids=["404", "any error"],
)
def test_a_notice_that_fails_is_logged_and_the_stop_comes_on_time(caplog, deaf):
    hub = StandInHub([reading("alice")], deaf=deaf)
    clock = [0.0]
    culler = ServerCuller(hub, IDLE_AFTER, WARN, clock=lambda: clock[0])  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="jupyter_gpu.hub"):
        passes(culler, clock, 0.0)
    assert [n["action"] for n in culler.notes] == ["warn"]
    assert f"could not tell alice of the stop: {deaf}" in caplog.text
    passes(culler, clock, WARN - 1)
    assert hub.stopped == []
    passes(culler, clock, WARN)
    assert hub.stopped == ["alice"]


def test_a_stop_that_fails_does_not_spare_the_others():
    hub = StandInHub([reading("gone"), reading("idle")], refuse={"gone"})
    clock = [0.0]
    culler = ServerCuller(hub, IDLE_AFTER, 0.0, clock=lambda: clock[0])  # type: ignore[arg-type]
    passes(culler, clock, 0.0)
    assert hub.stopped == ["idle"]
    assert hub.told == []  # no warning time, no notice


def test_the_notices_of_a_pass_go_at_once_after_its_stops():
    """A server that does not answer costs the pass one wait, not one per warned server, and
    the stops of the pass are not behind the notices."""
    order: list[str] = []

    class SlowHub(StandInHub):
        all_asked = asyncio.Event()

        async def stop_server(self, server: UserServer) -> None:
            order.append(f"stop {server.user}")

        async def notify_stop(self, server: UserServer, stop_in: float, reason: str, by: str) -> None:
            if server.user == "stale":  # its warning, in the pass before
                return
            order.append(f"tell {server.user}")
            if sum(o.startswith("tell") for o in order) == 5:
                self.all_asked.set()
            # each answers only once all five were asked: one after another, the first never would
            await asyncio.wait_for(self.all_asked.wait(), 5)
            order.append(f"told {server.user}")

    hub = SlowHub([reading("stale")])
    clock = [0.0]
    culler = ServerCuller(hub, IDLE_AFTER, WARN, clock=lambda: clock[0])  # type: ignore[arg-type]
    passes(culler, clock, 0.0)  # warned
    order.clear()
    hub.readings = [reading("stale"), *[reading(f"t{i}") for i in range(5)]]
    passes(culler, clock, WARN)  # stale's time is up as the others are first seen
    assert order[0] == "stop stale"
    assert sorted(order[1:6]) == [f"tell t{i}" for i in range(5)]
    assert sorted(order[6:]) == [f"told t{i}" for i in range(5)]


def test_a_terminal_in_use_keeps_the_server_and_one_that_cannot_be_read_stops_nothing():
    hub = StandInHub(
        [reading("typing"), reading("unread"), reading("old", idle=500.0), reading("fresh", idle=1.0)]
    )
    hub.terminals = {"typing": 3.0, "unread": HubError("typing's server answered HTTP 500"), "old": 900.0}
    clock = [0.0]
    culler = ServerCuller(hub, IDLE_AFTER, WARN, clock=lambda: clock[0])  # type: ignore[arg-type]
    passes(culler, clock, 0.0, WARN, 2 * WARN)
    assert hub.stopped == ["old"]  # its terminal is older than its kernels: they decide
    assert [n["message"] for n in culler.notes if n["action"] == "stop"] == [
        "old's server stopped: every kernel and terminal idle for at least 8 min"
    ]
    assert "fresh" not in hub.asked_terminals  # asked only of a server close to its warning
