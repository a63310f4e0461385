"""The Hub culler's rules on their own (a stand-in Hub and clock): never a server it cannot read,
never one with a busy kernel, always a warning first, and a failing stop does not end the pass."""

from __future__ import annotations

import asyncio

from jupyter_gpu.hub.fleet import HubError
from jupyter_gpu.hub.replies import Listed
from jupyter_gpu.hub.server_culler import ServerCuller
from jupyter_gpu.hub.view import Reading, UserServer

IDLE_AFTER, WARN = 100.0, 10.0


class StandInHub:
    def __init__(self, readings: list[Reading], refuse: set[str] = frozenset()) -> None:
        self.readings, self.refuse, self.stopped = readings, refuse, []

    async def read_all(self) -> list[Reading]:
        return self.readings

    async def stop_server(self, server: UserServer) -> None:
        if server.user in self.refuse:
            raise HubError(f"the Hub has no users/{server.user}/server", 404)
        self.stopped.append(server.user)


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


def test_a_stop_that_fails_does_not_spare_the_others():
    hub = StandInHub([reading("gone"), reading("idle")], refuse={"gone"})
    clock = [0.0]
    culler = ServerCuller(hub, IDLE_AFTER, 0.0, clock=lambda: clock[0])  # type: ignore[arg-type]
    passes(culler, clock, 0.0)
    assert hub.stopped == ["idle"]
