"""``--cull-idle-servers SECONDS``: the Hub stops a student's server whose kernels have all sat
idle that long (or that has had no kernel that long), whatever tabs are open: JupyterHub's
own idle culler counts every API request as activity, a forgotten tab's polls among them, so a
GPU pod would be held for ever. A server with a busy kernel is never stopped, nor one that cannot
be read (not answering, an error: the culler does not stop what it cannot see), and every stop
is warned ``warn_before`` seconds ahead, in the service's log, on the instructor's page and in the
student's open JupyterLab tabs (a notification). The figures are the server's own jupyter_gpu kernels
reply (``idle_seconds``), read as the instructor's page reads them; the stop goes through the
Hub's API. Each warning and stop is logged (who and why) and kept for the instructor's page.
Input or output in a terminal (its ``last_activity``) is use too: a run there that prints keeps
the server, a silent one does not.

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

from ..analysis.idle import server_idle_seconds
from ..analysis.units import format_duration
from .fleet import Hub, HubError
from .view import Reading, UserServer

log = logging.getLogger("jupyter_gpu.hub")
KEEP_NOTES = 100  # the last warnings and stops the instructor's page shows
BY = "the Hub's idle culler"  # who stops the server, as the student's notification says


class ServerCuller:
    def __init__(
        self, hub: Hub, idle_after: float, warn_before: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hub = hub
        self.idle_after, self.warn_before = idle_after, warn_before
        self.clock = clock  # monotonic: a clock set forward stops nobody
        self._quiet_since: dict[tuple[str, str], float] = {}  # seen without a kernel since
        self._warned_at: dict[tuple[str, str], float] = {}
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
            except Exception:  # culling goes on, and the page with it
                log.exception("jupyter-gpu culler: a pass failed")
            await asyncio.sleep(self.every)

    async def check(self) -> None:
        """One pass over the running servers: warn those about to be stopped, stop those whose
        time is up and that were warned at least ``warn_before`` ago."""
        now = self.clock()
        readings = await self.hub.read_all()
        seen = {(r.server.user, r.server.name) for r in readings}
        for key in set(self._quiet_since) - seen:
            self._quiet_since.pop(key)
        for key in set(self._warned_at) - seen:
            self._warned_at.pop(key)
        notices: list[tuple[UserServer, float, str]] = []
        for reading in readings:
            try:
                await self._one(reading, now, notices)
            except HubError as error:  # e.g. stopped meanwhile: the others still get their turn
                log.warning("jupyter-gpu culler: %s's server: %s", reading.server.user, error)
        # After the pass's stops, all at once: a slow or dead server costs the pass one timeout
        # at most, and a stop's time was set at its warning, whenever the notice arrives.
        await asyncio.gather(*(self._tell(*notice) for notice in notices))

    async def _one(self, reading: Reading, now: float, notices: list[tuple[UserServer, float, str]]) -> None:
        key = (reading.server.user, reading.server.name)
        if reading.state != "ok" or reading.kernels is None:
            return  # what cannot be read is never stopped
        kernels = reading.kernels.rows
        if kernels:
            self._quiet_since.pop(key, None)
        quiet = now - self._quiet_since.setdefault(key, now) if not kernels else 0.0
        idle = server_idle_seconds(kernels, quiet)
        warned = self._warned_at.get(key)
        if idle is None or self.idle_after - idle > self.warn_before:  # a busy kernel, or used
            self._warned_at.pop(key, None)  # used again: warn again next time
            return
        remaining = max(0.0, self.idle_after - idle)
        # Close to a warning or a stop: input or output in a terminal is use too (asked only
        # now, so a pass costs the servers in use nothing more); unreadable: HubError, no stop.
        terminals = await self.hub.terminals_idle(reading.server)
        if terminals is not None and terminals < idle:
            idle, remaining = terminals, max(0.0, self.idle_after - terminals)
            if remaining > self.warn_before:
                self._warned_at.pop(key, None)
                return
        why = _why(kernels, idle, terminals is not None)
        if self.warn_before > 0 and warned is None:
            self._warned_at[key] = now
            stop_in = max(remaining, self.warn_before)
            self._note("warn", reading, f"will be stopped in {format_duration(stop_in)}: {why}")
            notices.append((reading.server, stop_in, why))
            return
        if remaining > 0 or (warned is not None and now - warned < self.warn_before):
            return
        await self.hub.stop_server(reading.server)
        self._quiet_since.pop(key, None)
        self._warned_at.pop(key, None)
        self._note("stop", reading, f"stopped: {why}")

    async def _tell(self, server: UserServer, stop_in: float, why: str) -> None:
        """The warning, in the student's JupyterLab tabs; one that fails is logged, and the stop
        comes all the same (a student whose server cannot hear it has the page and the log)."""
        try:
            await self.hub.notify_stop(server, stop_in, why, BY)
        except Exception as error:  # HubError, or anything else: never out of the pass
            log.warning("jupyter-gpu culler: could not tell %s of the stop: %s", server.user, error)
        else:
            log.info("jupyter-gpu culler: told %s's tabs: the server stops in %.0f s", server.user, stop_in)

    def _note(self, action: str, reading: Reading, text: str) -> None:
        server = reading.server
        who = f"{server.user}'s server" + (f" {server.name!r}" if server.name else "")
        log.warning("jupyter-gpu culler: %s %s", who, text)
        self.notes.append(
            {
                "time": time.time(),  # for the page: wall-clock seconds
                "action": action,
                "user": server.user,
                "server": server.name,
                "message": f"{who} {text}",
            }
        )


def _why(kernels: list[dict[str, Any]], idle: float | None, terminals: bool = False) -> str:
    if idle is None:
        return "a kernel is busy"
    also = " and no terminal used" if terminals else ""
    if not kernels:
        return f"no kernel{also} for {format_duration(idle)}"
    return f"every kernel{' and terminal' if terminals else ''} idle for at least {format_duration(idle)}"
