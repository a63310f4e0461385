"""REST handlers under ``{base_url}api/gpu/``. Thin: they read sampler state, never NVML."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import time
from typing import TYPE_CHECKING, Any

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..analysis.bounded import MAX_COUNT
from ..analysis.cells import MAX_CELLS
from ..analysis.idle import IDLE_STATES
from .actions import ActionRefused, free_cache
from .host import host_reply
from .kernels import kernel_model
from .notices import BadNotice, parse
from .telemetry import devices_payload, telemetry_fields, telemetry_json

if TYPE_CHECKING:
    from typing import TypeAlias

    from .app import GPUMonitor
    from .schema.replies import (
        DevicesReply,
        ExitsReply,
        FreeCacheReply,
        HostReply,
        KernelsReply,
        ServerStopNoticeReply,
    )

    # What ``send`` takes: a reply, or its body already encoded (telemetry and cells are
    # assembled from pre-encoded parts).
    Body: TypeAlias = (
        DevicesReply | KernelsReply | FreeCacheReply | HostReply | ExitsReply | ServerStopNoticeReply | str
    )

AUTH_RESOURCE = "gpu"
# A page load asks for the whole history (~1.2 kB per sample for two GPUs, ~0.7 MB for the default
# ten minutes); it compresses ~20x. Small incremental polls are not worth a thread hop.
GZIP_MIN_BYTES = 16 * 1024


class GPUHandler(APIHandler):
    """Base: authenticated and authorised like the rest of jupyter_server, strict query checks."""

    auth_resource = AUTH_RESOURCE
    # The panel's polls are no user activity: JupyterHub's idle culler (which reads the server's
    # last activity) must not keep a server with a forgotten tab alive, as /api/status does not.
    _track_activity = False
    allowed_params: frozenset[str] = frozenset()
    # jupyter_server takes the token from `?token=` as well as from the Authorization header.
    auth_params = frozenset({"token"})

    def initialize(self, monitor: GPUMonitor) -> None:
        self.monitor = monitor

    def check_params(self) -> None:
        # JupyterLab's ServerConnection.makeRequest busts caches with a bare `?<timestamp>`.
        args = self.request.query_arguments
        cache_busters = {k for k, v in args.items() if k.isdigit() and v in ([b""], [])}
        allowed_params = self.allowed_params | self.auth_params
        unknown = sorted(set(args) - allowed_params - cache_busters)
        if unknown:
            allowed = ", ".join(sorted(allowed_params))
            raise web.HTTPError(400, f"Unknown query parameter(s): {', '.join(unknown)}. Allowed: {allowed}.")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """jupyter_server's JSON error, with the message as written: it sends an HTTPError's
        ``log_message``, a format string in which tornado doubles every ``%``, so "run
        `%load_ext jupyter_gpu`" reached the user as ``%%load_ext``."""
        error = (kwargs.get("exc_info") or (None, None, None))[1]
        if not isinstance(error, web.HTTPError) or not error.log_message:
            super().write_error(status_code, **kwargs)
            return
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": error.log_message % error.args, "reason": error.reason}))

    def compute_etag(self) -> str | None:
        """None: every reply is ``no-store``, so no browser asks whether it changed, and hashing a
        page load's reply (tornado's SHA-1 of each body) cost the event loop more than sending it."""
        return None

    def send(self, payload: Body) -> None:
        self.set_header("Cache-Control", "no-store")
        self.finish(payload if isinstance(payload, str) else json.dumps(payload))

    async def send_large(self, body: str) -> None:
        """Gzip big bodies for clients that accept it, compressing off the event loop."""
        if len(body) < GZIP_MIN_BYTES or "gzip" not in self.request.headers.get("Accept-Encoding", ""):
            self.send(body)
            return
        data = await asyncio.get_running_loop().run_in_executor(None, gzip.compress, body.encode(), 5)
        self.set_header("Cache-Control", "no-store")
        self.set_header("Content-Encoding", "gzip")
        self.set_header("Vary", "Accept-Encoding")
        self.finish(data)


class DevicesHandler(GPUHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        self.check_params()
        self.send(devices_payload(self.monitor.sampler.status, simulated=self.monitor.simulated))


class TelemetryHandler(GPUHandler):
    allowed_params = frozenset({"since"})

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.check_params()
        since = self._since()
        sampler = self.monitor.sampler
        self.monitor.owners.update(self.monitor.kernels.last)
        if since is None and sampler.status.available and sampler.history_ends():
            await self._send_full()
            return
        history = sampler.since(since)
        await self.send_large(
            telemetry_json(
                sampler.status,
                sampler.latest(),
                history,
                simulated=self.monitor.simulated,
                interval=sampler.interval,
                now=time.time(),
                owners=self.monitor.owners.reply(),
            )
        )

    async def _send_full(self) -> None:
        """A page load's reply: the history thinned, encoded and gzipped once per sample; the
        latest sample is the history's newest."""
        sampler = self.monitor.sampler
        fields = telemetry_fields(
            sampler.status,
            simulated=self.monitor.simulated,
            interval=sampler.interval,
            now=time.time(),
            owners=self.monitor.owners.reply(),
        )
        gzipped = "gzip" in self.request.headers.get("Accept-Encoding", "")
        body = await self.monitor.full_history.reply(sampler, fields, gzip=gzipped)
        self.set_header("Cache-Control", "no-store")
        if gzipped:
            self.set_header("Content-Encoding", "gzip")
            self.set_header("Vary", "Accept-Encoding")
        self.finish(body)

    def _since(self) -> float | None:
        raw = self.get_query_argument("since", None)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise web.HTTPError(
                400,
                f"`since` must be a time in seconds since the Unix epoch, e.g. 1764460800.5; got {raw!r}.",
            )
        return value


class KernelsHandler(GPUHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.check_params()
        payload = await self.monitor.kernels.refresh()
        # Whether this user may act on kernels (free cache, interrupt, restart, shut down), so
        # that a read-only user sees the kernels without buttons that would answer 403.
        allowed = await ensure_async(
            self.authorizer.is_authorized(self, self.current_user, "write", "kernels")
        )
        reply: KernelsReply = {**payload, "actions_allowed": bool(allowed)}
        self.send(reply)


class HostHandler(GPUHandler):
    """The container's limits and the kernels' resident memory (the kernels this user sees)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.check_params()
        view = self.monitor.kernels.last or await self.monitor.kernels.refresh()
        self.send(await host_reply(view["kernels"]))


class ExitsHandler(GPUHandler):
    """The kernels that died without being asked to, and why."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        self.check_params()
        self.send(self.monitor.exits.reply())


class CellsHandler(GPUHandler):
    """A page of a kernel's cells: ``since`` (the ``cursor`` of an earlier reply) and ``limit``."""

    allowed_params = frozenset({"since", "limit"})

    @web.authenticated
    @authorized
    async def get(self, kernel_id: str) -> None:
        self.check_params()
        since = self._count("since", 0, MAX_COUNT, "the `cursor` of an earlier cells reply")
        limit = self._count("limit", 1, MAX_CELLS, f"a number of cells from 1 to {MAX_CELLS}")
        body = await self.monitor.kernels.cells(kernel_id, since, MAX_CELLS if limit is None else limit)
        if body is None:
            raise web.HTTPError(404, f"No kernel with id {kernel_id[:80]!r} on this server.")
        await self.send_large(body)

    def _count(self, name: str, low: int, high: int, what: str) -> int | None:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return None
        # ASCII digits, and few of them: int() takes Unicode digits, and 4,300 digits are slow
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 16 and low <= int(raw) <= high):
            raise web.HTTPError(400, f"`{name}` must be {what}; got {raw[:40]!r}.")
        return int(raw)


class FreeCacheHandler(GPUHandler):
    """An action on a kernel: authorised as jupyter_server authorises its own kernel actions."""

    auth_resource = "kernels"
    _track_activity = True  # someone clicked: that is activity

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        self.check_params()
        assert self.monitor.serverapp is not None  # set by jupyter_server before extensions load
        manager = self.monitor.serverapp.kernel_manager
        model = await kernel_model(manager, kernel_id)
        if model is None:
            raise web.HTTPError(*self._not_a_kernel(kernel_id))
        state = model["execution_state"]
        if state not in IDLE_STATES:
            raise web.HTTPError(
                409, f"The kernel is {state}; its cache can be freed only while it is idle (between cells)."
            )
        try:
            reply = await free_cache(manager.get_kernel(kernel_id), kernel_id)
        except ActionRefused as refused:
            raise web.HTTPError(409, str(refused)) from None
        self.monitor.log.info(
            "jupyter_gpu: freed %d bytes of PyTorch's cache in kernel %s", reply["freed_bytes"], kernel_id
        )
        self.send(reply)

    def _not_a_kernel(self, kernel_id: str) -> tuple[int, str]:
        """A GPU process that is no kernel of this server is refused by name; anything else is 404."""
        # ASCII digits only, and few of them: int() refuses Unicode digits and 4,300-digit strings
        if kernel_id.isascii() and kernel_id.isdigit() and len(kernel_id) <= 10:
            latest = self.monitor.sampler.latest()
            pids = {p["pid"] for g in (latest.gpus if latest else ()) for p in g.get("processes") or ()}
            if int(kernel_id) in pids:
                return 409, (
                    f"Process {kernel_id} is not a kernel of this server: jupyter_gpu acts only on "
                    "this server's kernels."
                )
        return 404, f"No kernel with id {kernel_id[:80]!r} on this server."


class ServerStopNoticeHandler(GPUHandler):
    """A notice that this server will be stopped (the Hub's idle-server culler posts it), passed to
    the user's open JupyterLab tabs."""

    # Not activity: a notice that kept the server alive would never come true, and the Hub's culler
    # would warn again and again.
    _track_activity = False

    @web.authenticated
    @authorized
    def post(self) -> None:
        self.check_params()
        try:
            stop_in, reason, by = parse(self.request.body)
        except BadNotice as error:
            raise web.HTTPError(400, str(error)) from None
        self.send(self.monitor.notices.tell(stop_in, reason, by))


def route_table(monitor: GPUMonitor) -> list[tuple[str, type[GPUHandler], dict[str, GPUMonitor]]]:
    """Routes relative to base_url (the ExtensionApp prepends it)."""
    kwargs = {"monitor": monitor}
    return [
        (r"/api/gpu/devices", DevicesHandler, kwargs),
        (r"/api/gpu/telemetry", TelemetryHandler, kwargs),
        (r"/api/gpu/kernels", KernelsHandler, kwargs),
        (r"/api/gpu/host", HostHandler, kwargs),
        (r"/api/gpu/exits", ExitsHandler, kwargs),
        (r"/api/gpu/kernels/(?P<kernel_id>[^/]+)/cells", CellsHandler, kwargs),
        (r"/api/gpu/kernels/(?P<kernel_id>[^/]+)/free-cache", FreeCacheHandler, kwargs),
        (r"/api/gpu/notices/server-stop", ServerStopNoticeHandler, kwargs),
    ]
