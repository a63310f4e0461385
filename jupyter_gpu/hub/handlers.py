"""The service's routes: the page, its JSON, and the two actions (POST, XSRF-checked).

People are identified by the Hub's OAuth (``HubOAuthenticated``); only those whose token has
``access:services!service=<this service>`` get in (the Hub's own access check for services;
the role in the docs' JupyterHub guide grants it to instructors). The identity is resolved in ``prepare`` without
blocking the event loop (HubAuth's synchronous ``get_current_user`` would wait on a thread).
A cookie-authenticated POST without the page's XSRF token identifies nobody (HubOAuth's own
rule), so it is refused with 403 like a stranger's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from typing import Any

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from tornado import web

from . import page, view
from .fleet import Hub, HubError, log
from .server_culler import ServerCuller

# Kernel ids are UUIDs; JupyterHub user and server names are short printable names.
KERNEL_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
NAME_MAX = 255


class ServiceHandler(HubOAuthenticated, web.RequestHandler):
    def initialize(self, hub: Hub, builder: Builder) -> None:
        self.hub = hub
        self.builder = builder

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        if model is None:
            self.current_user = None
            return
        try:
            self.current_user = self.check_hub_user(model)
        except UserNotAllowed:
            raise web.HTTPError(403, f"{model.get('name')} may not use this service") from None

    @property
    def who(self) -> str:
        return str(self.current_user["name"])


class APIHandler(ServiceHandler):
    """No redirect to the login page for programs: 403 without an identity; errors as JSON."""

    def get_login_url(self) -> str:
        raise web.HTTPError(403, "not logged in")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        error = kwargs.get("exc_info", (None, None))[1]
        message = self._reason
        if isinstance(error, web.HTTPError) and error.log_message:  # tornado doubled its `%`s
            message = error.log_message % error.args
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def send(self, payload: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(payload))

    def body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "the body must be a JSON object")
        user, server = body.get("user"), body.get("server", "")
        if not (isinstance(user, str) and 0 < len(user) <= NAME_MAX):
            raise web.HTTPError(400, "`user` must name a user")
        if not (isinstance(server, str) and len(server) <= NAME_MAX):
            raise web.HTTPError(400, "`server` must name a server ('' for the default one)")
        return body

    async def target(self, body: dict[str, Any]) -> view.UserServer:
        try:
            return await self.hub.server_of(body["user"], body.get("server", ""))
        except HubError as error:
            raise web.HTTPError(error.status, str(error)) from None


class PageHandler(ServiceHandler):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        names = page.namespace(
            self.current_user,
            hub_prefix=self.hub_auth.hub_prefix,
            base_url=self.hub_auth.base_url,
            xsrf=self.xsrf_token.decode(),
        )
        self.finish(self.settings["jinja"].get_template("gpu.html").render(**names))


class KernelsHandler(APIHandler):
    @web.authenticated
    async def get(self) -> None:
        self.send(await self.builder.build())


class ShutdownKernelHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        body = self.body()
        kernel_id = body.get("kernel_id")
        if not (isinstance(kernel_id, str) and KERNEL_ID.fullmatch(kernel_id)):
            raise web.HTTPError(400, "`kernel_id` must be a kernel id")
        server = await self.target(body)
        try:
            await self.hub.shut_down_kernel(server, kernel_id, by=self.who)
        except HubError as error:
            log.warning("%s could not shut down kernel %s of %s: %s", self.who, kernel_id, server.user, error)
            raise web.HTTPError(error.status, str(error)) from None
        log.info("%s shut down kernel %s of %s (server %r)", self.who, kernel_id, server.user, server.name)
        self.send({"done": f"kernel {kernel_id} of {server.user} shut down"})


class StopServerHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        server = await self.target(self.body())
        try:
            await self.hub.stop_server(server)
        except HubError as error:
            log.warning("%s could not stop %s's server %r: %s", self.who, server.user, server.name, error)
            raise web.HTTPError(error.status, str(error)) from None
        log.info("%s stopped %s's server %r", self.who, server.user, server.name)
        self.send({"done": f"{server.user}'s server is stopping"})


class Builder:
    """Builds the view; page loads that arrive while one build runs share its result, so ten
    open pages refreshing cost the user servers one round of requests, not ten. ``node`` is the
    Hub node's own reading of its GPUs (``fleet.node_gpus``), what servers' claims are held to."""

    def __init__(
        self, hub: Hub, node: Sequence[dict[str, Any]] = (), culler: ServerCuller | None = None
    ) -> None:
        self.hub = hub
        self.node = node
        self.culler = culler
        self._running: asyncio.Future[dict[str, Any]] | None = None

    async def build(self) -> dict[str, Any]:
        if self._running is None:
            self._running = asyncio.ensure_future(self._build())
            self._running.add_done_callback(lambda _: setattr(self, "_running", None))
        return await asyncio.shield(self._running)

    async def _build(self) -> dict[str, Any]:
        try:
            readings = await self.hub.read_all()
        except HubError as error:
            raise web.HTTPError(502, str(error)) from None
        built = view.build(readings, now=time.time(), timeout=self.hub.timeout, node=self.node)
        # the idle-server culler's last warnings and stops, newest first; [] when it is off
        built["culled"] = list(reversed(self.culler.notes)) if self.culler is not None else []
        return built
