"""``--cull-idle-servers SECONDS``: the Hub stops a student's server whose kernels have all sat
idle that long (or that has had none, or not answered, that long), whatever tabs are open: JupyterHub's
own idle culler counts every API request as activity, a forgotten tab's polls among them, so a
GPU pod would be held for ever. A server with a busy kernel is never stopped. The figures are the
server's own jupyter_gpu kernels reply (``idle_seconds``), read as the instructor's page reads
them; the stop goes through the Hub's API. Each warning and stop is logged (who and why) and kept
for the instructor's page.

A student's server is her own code: it can keep itself alive by claiming a busy kernel. This
culler frees GPUs forgotten by fair users; a Hub's own limits (``c.Spawner`` timeouts) bound the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..analysis.idle import cull_action, server_idle_seconds
from ..analysis.units import format_duration
from .fleet import Hub, HubError
from .view import Reading

log = logging.getLogger("jupyter_gpu.hub")
KEEP_NOTES = 100  # the last warnings and stops the instructor's page shows


class ServerCuller:
    def __init__(
        self, hub: Hub, idle_after: float, warn_before: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.hub = hub
        self.idle_after, self.warn_before = idle_after, warn_before
        self.clock = clock
        self._quiet_since: dict[tuple[str, str], float] = {}  # no kernel, or no answer, since
        self._warned: set[tuple[str, str]] = set()
        self.notes: deque[dict[str, Any]] = deque(maxlen=KEEP_NOTES)

    @property
    def every(self) -> float:
        """Seconds between checks: a tenth of the idle time, between 1 s and a minute."""
        return min(60.0, max(1.0, self.idle_after / 10))

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except HubError as error:
                log.warning("jupyter-gpu culler: the Hub could not be asked: %s", error)
            await asyncio.sleep(self.every)

    async def check(self) -> None:
        """One pass over the running servers: warn those about to be stopped, stop those whose
        time is up."""
        now = self.clock()
        readings = await self.hub.read_all()
        seen = {(r.server.user, r.server.name) for r in readings}
        for key in set(self._quiet_since) - seen:
            self._quiet_since.pop(key)
            self._warned.discard(key)
        for reading in readings:
            await self._one(reading, now)

    async def _one(self, reading: Reading, now: float) -> None:
        key = (reading.server.user, reading.server.name)
        kernels = reading.kernels.rows if reading.state == "ok" and reading.kernels else None
        if kernels:
            self._quiet_since.pop(key, None)
        quiet = now - self._quiet_since.setdefault(key, now) if not kernels else 0.0
        idle = server_idle_seconds(kernels, quiet)
        remaining = None if idle is None else max(0.0, self.idle_after - idle)
        action = cull_action(remaining, self.warn_before, key in self._warned)
        if remaining is None or remaining > self.warn_before:
            self._warned.discard(key)
        why = _why(reading, kernels, idle)
        if action == "warn":
            self._warned.add(key)
            self._note("warn", reading, f"will be stopped in {format_duration(remaining)}: {why}")
        elif action == "cull":
            await self.hub.stop_server(reading.server)
            self._quiet_since.pop(key, None)
            self._warned.discard(key)
            self._note("stop", reading, f"stopped: {why}")

    def _note(self, action: str, reading: Reading, text: str) -> None:
        server = reading.server
        who = f"{server.user}'s server" + (f" {server.name!r}" if server.name else "")
        log.warning("jupyter-gpu culler: %s %s", who, text)
        self.notes.append(
            {
                "time": self.clock(),
                "action": action,
                "user": server.user,
                "server": server.name,
                "message": f"{who} {text}",
            }
        )


def _why(reading: Reading, kernels: list[dict[str, Any]] | None, idle: float | None) -> str:
    if idle is None:
        return "a kernel is busy"
    if reading.state != "ok":
        return f"not answering for {format_duration(idle)}"
    if not kernels:
        return f"no kernel for {format_duration(idle)}"
    return f"every kernel idle for at least {format_duration(idle)}"
