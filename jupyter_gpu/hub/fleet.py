"""Talking to the Hub's REST API and, concurrently, to every running user server.

Everything goes through the package's one client (``jupyter_gpu.client.Server``, its async
methods): no proxy, no redirects followed, a deadline and a size limit on every request. A user
server that is slow or dead costs at most ``timeout`` seconds, spent at the same time as every
other server's: the page waits for the slowest answer or the timeout, whichever comes first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pynvml

from ..client import Server, ServerError, Unreachable
from ..nvml.holders import all_devices
from .replies import MAX_KERNELS, BadReply, check_kernels, check_telemetry, terminals_idle_seconds
from .view import Reading, UserServer

log = logging.getLogger("jupyter_gpu.hub")
# Read at most this much of a server's reply (the client stops there): the page shows 256 of its
# kernels, ~1.5 kB each with 8 GPUs and a long path, and parsing a reply holds the event loop
# (~20 ms a MiB). A telemetry reply asked for the latest sample only is tens of kB.
MAX_KERNELS_REPLY = MAX_KERNELS * 4 * 2**10
MAX_TELEMETRY_REPLY = 2**20
# The server's answer to a notice is the notice again: well under this.
MAX_NOTICE_REPLY = 8 * 2**10
# A terminal is a name and a time (~80 bytes): the first MAX_TERMINALS of them and some.
MAX_TERMINALS_REPLY = 64 * 2**10
# Minted per action, revoked right after: a minute is more than one DELETE needs.
ACTION_TOKEN_SECONDS = 60
# Reading a server's figures: minted per server, reused until this close to expiry, revoked when
# the server stops. Never the service's own token: that one reaches every server of the Hub, and a
# student's server (her own code) sees every request it receives.
READ_TOKEN_SECONDS = 600
READ_TOKEN_RENEW = 120


@dataclass
class _Token:
    token: str
    id: str
    expires: float  # time.monotonic()


class HubError(Exception):
    """The Hub refused or failed a request; ``status`` is what the service answers the browser."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class Hub:
    """The Hub's API as this service's own token may use it, and the user servers behind the proxy."""

    def __init__(self, api: Server, proxy_url: str, *, timeout: float) -> None:
        self.api = api  # {hub}/hub/api/ with the service's token
        self.proxy_url = proxy_url.rstrip("/")
        self.timeout = timeout
        self._read_tokens: dict[tuple[str, str], _Token] = {}

    async def _mint(self, server: UserServer, seconds: int, note: str) -> _Token:
        """A token of the server's user that reaches that one server only."""
        minted = await self._call(
            "POST",
            f"users/{_quote(server.user)}/tokens",
            {
                "scopes": [f"access:servers!server={server.user}/{server.name}"],
                "expires_in": seconds,
                "note": note,
            },
        )
        return _Token(minted["token"], minted["id"], time.monotonic() + seconds)

    async def _revoke(self, user: str, token: _Token) -> None:
        try:
            await self._call("DELETE", f"users/{_quote(user)}/tokens/{_quote(token.id)}")
        except HubError as error:  # it expires on its own
            log.warning("jupyter-gpu: could not revoke a token of %s: %s", user, error)

    async def _read_token(self, server: UserServer) -> str:
        key = (server.user, server.name)
        held = self._read_tokens.get(key)
        if held is not None and held.expires - time.monotonic() > READ_TOKEN_RENEW:
            return held.token
        fresh = await self._mint(server, READ_TOKEN_SECONDS, "jupyter-gpu: reads this server's GPU figures")
        self._read_tokens[key] = fresh
        if held is not None:
            await self._revoke(server.user, held)
        return fresh.token

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        try:
            reply = await self.api.send_async(
                path, method=method, body=data, headers={"Content-Type": "application/json"}, timeout=10
            )
        except ServerError as error:
            raise HubError(f"the Hub's API does not answer: {error}") from None
        if reply.status == 404:
            raise HubError(f"the Hub has no {path.split('?')[0]}", 404)
        if reply.status >= 300:
            raise HubError(f"the Hub answered HTTP {reply.status} to {method} {path.split('?')[0]}")
        return json.loads(reply.body) if reply.body else None

    async def running_servers(self) -> list[UserServer]:
        """Every ready server of every user, default and named, as the Hub lists them."""
        found: list[UserServer] = []
        offset = 0
        while True:
            # Ask for the paginated form: plain lists stop silently at the Hub's page limit.
            try:
                reply = await self.api.send_async(
                    f"users?state=ready&offset={offset}",
                    headers={"Accept": "application/jupyterhub-pagination+json"},
                    timeout=10,
                )
            except ServerError as error:
                raise HubError(f"the Hub's API does not answer: {error}") from None
            if reply.status != 200:
                raise HubError(f"the Hub answered HTTP {reply.status} when asked for its users")
            page = json.loads(reply.body)
            for user in page["items"]:
                found.extend(servers_of(user))
            following = (page.get("_pagination") or {}).get("next")
            if not following:
                return found
            offset = following["offset"]

    async def server_of(self, user: str, name: str) -> UserServer:
        """The user's running server called ``name`` ('' for the default), from the Hub: an
        action's target is what the Hub says, never a URL from the browser."""
        model = await self._call("GET", f"users/{_quote(user)}")
        for server in servers_of(model):
            if server.name == name:
                return server
        raise HubError(f"{user} has no running server {name!r}", 404)

    async def read(self, server: UserServer) -> Reading:
        """The server's kernels and latest GPU sample, asked at once with a token for it alone."""
        try:
            token = await self._read_token(server)
        except HubError as error:
            return Reading(server, "error", f"no token for this server: {error}")
        at = Server(self.proxy_url + server.url, token)
        try:
            kernels, telemetry = await asyncio.gather(
                at.get_async("api/gpu/kernels", timeout=self.timeout, max_bytes=MAX_KERNELS_REPLY),
                # since=now: the latest sample only, without the history
                at.get_async(
                    f"api/gpu/telemetry?since={time.time():.3f}",
                    timeout=self.timeout,
                    max_bytes=MAX_TELEMETRY_REPLY,
                ),
            )
        except ServerError as error:
            # The proxy answers 502/503 for a server whose process is gone.
            dead = isinstance(error, Unreachable) or error.status in (502, 503, 504)
            state = "not_answering" if dead else "error"
            return Reading(server, state, _without_host(str(error), at.url))
        try:
            return Reading(server, "ok", None, check_kernels(kernels), check_telemetry(telemetry))
        except BadReply as error:
            return Reading(server, "error", f"unexpected reply: {error}")

    async def read_all(self) -> list[Reading]:
        servers = await self.running_servers()
        running = {(s.user, s.name) for s in servers}
        for key in [k for k in self._read_tokens if k not in running]:  # stopped: its token goes
            await self._revoke(key[0], self._read_tokens.pop(key))
        return list(await asyncio.gather(*(self.read(s) for s in servers)))

    async def shut_down_kernel(self, server: UserServer, kernel_id: str, *, by: str) -> None:
        """DELETE the kernel through the user's own server API, with a token the Hub mints for
        this one server (``access:servers!server=<user>/<name>``) and that is revoked after."""
        minted = await self._mint(
            server, ACTION_TOKEN_SECONDS, f"jupyter-gpu: {by} shuts down kernel {kernel_id}"
        )
        try:
            at = Server(self.proxy_url + server.url, minted.token)
            try:
                reply = await at.send_async(f"api/kernels/{_quote(kernel_id)}", method="DELETE", timeout=10)
            except ServerError as error:
                raise HubError(
                    f"{server.user}'s server does not answer: {_without_host(str(error), at.url)}"
                ) from None
            if reply.status == 404:
                raise HubError(f"{server.user}'s server has no kernel {kernel_id}", 404)
            if reply.status >= 300:
                raise HubError(f"{server.user}'s server answered HTTP {reply.status} to the shutdown")
        finally:
            await self._revoke(server.user, minted)

    async def notify_stop(self, server: UserServer, stop_in: float, reason: str, by: str) -> None:
        """Tell the student, in her open JupyterLab tabs, that the server stops in ``stop_in``
        seconds and why (``POST api/gpu/notices/server-stop``, which is no activity there), with
        the token that reads the server's figures: it reaches that one server only. HubError if
        the notice did not arrive (an older jupyter_gpu answers 404); the caller only logs it."""
        token = await self._read_token(server)
        at = Server(self.proxy_url + server.url, token)
        body = {"stop_in_seconds": round(stop_in, 3), "reason": reason[:300], "by": by[:100]}
        try:
            reply = await at.send_async(
                "api/gpu/notices/server-stop",
                method="POST",
                body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                timeout=self.timeout,
                max_bytes=MAX_NOTICE_REPLY,
            )
        except ServerError as error:
            raise HubError(
                f"{server.user}'s server does not answer: {_without_host(str(error), at.url)}"
            ) from None
        if reply.status == 404:
            raise HubError(
                f"{server.user}'s server has no notices route (gone, or an older jupyter_gpu)", 404
            )
        if reply.status >= 300:
            raise HubError(f"{server.user}'s server answered HTTP {reply.status} to the notice")

    async def terminals_idle(self, server: UserServer) -> float | None:
        """Seconds since the server's terminals last had input or output, None without a
        terminal (or with terminals turned off): work in a terminal is use, as a kernel's is.
        HubError when the server cannot say."""
        token = await self._read_token(server)
        at = Server(self.proxy_url + server.url, token)
        try:
            reply = await at.send_async("api/terminals", timeout=self.timeout, max_bytes=MAX_TERMINALS_REPLY)
        except ServerError as error:
            raise HubError(
                f"{server.user}'s server does not answer: {_without_host(str(error), at.url)}"
            ) from None
        if reply.status == 404:  # jupyter_server without terminals
            return None
        if reply.status != 200:
            raise HubError(f"{server.user}'s server answered HTTP {reply.status} for its terminals")
        try:
            return terminals_idle_seconds(reply.body, time.time())
        except BadReply as error:
            raise HubError(f"{server.user}'s server: {error}") from None

    async def stop_server(self, server: UserServer) -> None:
        """Ask the Hub to stop the server (it answers at once; stopping may take a moment)."""
        path = f"users/{_quote(server.user)}/" + (
            f"servers/{_quote(server.name)}" if server.name else "server"
        )
        await self._call("DELETE", path)


def node_gpus(nvml: ModuleType | Any = pynvml) -> list[dict[str, Any]]:
    """The Hub node's own GPUs (index, uuid, name, total memory), as its NVML reads them, or none:
    what students' servers' claims about a GPU are checked against. Blocking: off the loop."""
    rows, _ = all_devices(nvml)
    return [
        {field: row.get(field) for field in ("index", "uuid", "name", "memory_total_bytes")} for row in rows
    ]


def servers_of(user: dict[str, Any]) -> list[UserServer]:
    """The ready servers in a Hub user model (its ``servers`` needs the ``read:servers`` scope)."""
    return [
        UserServer(user["name"], name, model["url"])
        for name, model in sorted((user.get("servers") or {}).items())
        if model.get("ready")
    ]


def _without_host(message: str, url: str) -> str:
    """The client's message with the server's address shortened to its path (the proxy's
    address means nothing to the reader and is the same for everyone)."""
    parts = urllib.parse.urlsplit(url)
    return message.replace(f"{parts.scheme}://{parts.netloc}", "")
