"""The one client of a Jupyter server's REST API: for ``jupyter gpu``, the doctor and ``%gpu_mem``.

A request to a Jupyter server carries its token, and the token is the user's account (it runs
code as them). So every request made here

- goes straight to the server, whatever ``http_proxy``, ``HTTP_PROXY`` or ``all_proxy`` say:
  a proxy (or whoever set the variable) would read the ``Authorization`` header;
- follows no redirect: urllib would send the token along to wherever the answer points;
- waits at most ``timeout`` seconds to connect and for each read, and reads at most
  ``max_bytes``: a server that hangs or floods costs a short wait, not a hung kernel;
- fails as one ``ServerError`` line, with the HTTP status when one came.

Servers are found through their ``jpserver-<pid>.json`` files in the runtime dir, trusting only
regular files of this user (``runtime_dir.read_own_file``): a file planted by another user, or a
symlink to one, could name their own listener and collect the token, the hub's included.
"""

from __future__ import annotations

import dataclasses
import functools
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from .analysis.units import format_bytes
from .runtime_dir import RefusedFile, connection_file, read_own_file

TIMEOUT = 5.0
# The full telemetry history of eight GPUs is ~3 MB; nothing this package asks for is bigger.
MAX_REPLY_BYTES = 16 * 2**20
MAX_SERVER_FILE_BYTES = 64 * 2**10


class ServerError(Exception):
    """A request that failed, as one line; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Unreachable(ServerError):
    """No answer at all: refused, reset, timed out (what a dead or hung server looks like)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class Reply(NamedTuple):
    """An HTTP answer of any status: what the doctor's probes of a server's settings look at."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass(frozen=True)
class Server:
    url: str  # base URL, base_url included, ending in "/"
    token: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    pid: int | None = field(default=None, compare=False)  # the server's process, when discovered

    def send(
        self,
        path: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        authenticate: bool = True,
        timeout: float = TIMEOUT,
        max_bytes: int = MAX_REPLY_BYTES,
    ) -> Reply:
        """One request to ``{url}{path}``; any HTTP status is a ``Reply``, no answer a ``ServerError``.

        ``authenticate=False`` leaves the token out: how a stranger's request looks to the server.
        """
        url = self.url + path
        request = urllib.request.Request(url, method=method, headers=headers or {})
        if self.token and authenticate:
            request.add_unredirected_header("Authorization", f"token {self.token}")
        try:
            with _OPENER.open(request, timeout=timeout) as response:
                status, answer = response.status, response.headers
                body = response.read(max_bytes + 1)
        except urllib.error.HTTPError as error:
            status, answer = error.code, error.headers
            body = error.read(max_bytes + 1) if error.fp else b""
            error.close()
        except (OSError, http.client.HTTPException) as error:  # URLError and timeouts included
            raise Unreachable(f"cannot reach {self.url}: {getattr(error, 'reason', None) or error}") from None
        if len(body) > max_bytes:
            raise ServerError(f"{url} sent more than {format_bytes(max_bytes)}: refused")
        return Reply(status, {k.lower(): v for k, v in (answer or {}).items()}, body)

    async def send_async(
        self,
        path: str,
        *,
        method: str = "GET",
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = TIMEOUT,
        max_bytes: int = MAX_REPLY_BYTES,
    ) -> Reply:
        """``send`` for code on an event loop (the hub service asks a hundred servers at once).

        Tornado's client, because urllib cannot bound a whole request: its timeout is per socket
        operation, so a server that trickles bytes would hold a thread for ever. Here ``timeout``
        bounds connect and reply together; like ``send`` it takes no proxy (tornado's simple
        client reads no proxy variables), follows no redirect and reads at most ``max_bytes``.
        """
        from tornado.httpclient import HTTPClientError, HTTPRequest
        from tornado.httputil import HTTPInputError

        url = self.url + path
        received: list[bytes] = []
        size = 0

        def collect(chunk: bytes) -> None:
            nonlocal size
            size += len(chunk)
            if size > max_bytes:
                raise ServerError(f"{url} sent more than {format_bytes(max_bytes)}: refused")
            received.append(chunk)

        request = HTTPRequest(
            url,
            method=method,
            body=body,
            headers={**(headers or {}), **({"Authorization": f"token {self.token}"} if self.token else {})},
            connect_timeout=timeout,
            request_timeout=timeout,
            follow_redirects=False,
            allow_nonstandard_methods=True,
            streaming_callback=collect,
        )
        # One client per request: no queue behind tornado's shared client's ten connections; no
        # body limit of tornado's (``collect`` is the limit, see _bounded_client_class).
        client = _bounded_client_class()(force_instance=True, max_clients=1, max_body_size=2**62)
        try:
            response = await client.fetch(request, raise_error=False)
        except HTTPClientError as error:  # 599: a timeout or a closed stream
            raise Unreachable(f"cannot reach {self.url}: {error.message}") from None
        except HTTPInputError as error:  # not HTTP
            raise ServerError(f"{url} sent a malformed reply: {error}") from None
        except OSError as error:  # refused, reset
            raise Unreachable(f"cannot reach {self.url}: {error}") from None
        finally:
            client.close()
        return Reply(response.code, {k.lower(): v for k, v in response.headers.get_all()}, b"".join(received))

    def get(self, path: str, *, timeout: float = TIMEOUT, max_bytes: int = MAX_REPLY_BYTES) -> dict[str, Any]:
        """GET ``{url}{path}`` (e.g. ``api/gpu/devices``) and return its JSON object."""
        return self._json_object(path, self.send(path, timeout=timeout, max_bytes=max_bytes))

    async def get_async(
        self, path: str, *, timeout: float = TIMEOUT, max_bytes: int = MAX_REPLY_BYTES
    ) -> dict[str, Any]:
        """``get`` on an event loop."""
        return self._json_object(path, await self.send_async(path, timeout=timeout, max_bytes=max_bytes))

    def _json_object(self, path: str, reply: Reply) -> dict[str, Any]:
        url = self.url + path
        if 300 <= reply.status < 400:
            raise ServerError(
                f"{url} redirects to {reply.headers.get('location')} (HTTP {reply.status}): not followed, "
                "the token would go along",
                reply.status,
            )
        if reply.status >= 400:
            raise ServerError(f"{url} answered HTTP {reply.status}", reply.status)
        try:
            data = json.loads(reply.body)
        except (ValueError, RecursionError):
            raise ServerError(f"{url} did not answer with JSON") from None
        if not isinstance(data, dict):
            raise ServerError(f"{url} answered with unexpected JSON")
        return data


@functools.cache
def _bounded_client_class() -> type[Any]:
    """Tornado's simple client, whose connections end a reply where the request's
    ``streaming_callback`` (``send_async``'s byte count) raises ``ServerError``: ``fetch`` then
    raises it, and at most a chunk (64 kB) past the limit is read, whatever Content-Length,
    chunked encoding or gzip say. Tornado's own ``max_body_size`` only closes the connection (a
    server that floods would read as "Connection closed"), and a callback's exception alone is
    logged as a traceback. Tornado is imported on first use: the CLI and the kernel never need it."""
    from tornado.simple_httpclient import SimpleAsyncHTTPClient, _HTTPConnection

    class Connection(_HTTPConnection):
        def data_received(self, chunk: bytes) -> Any:
            try:
                return super().data_received(chunk)
            except ServerError as error:  # ends the fetch with it, closes the connection
                self._handle_exception(type(error), error, error.__traceback__)
                return None

    class Client(SimpleAsyncHTTPClient):
        def _connection_class(self) -> type:
            return Connection

    return Client


def server_at(url: str, token: str | None) -> Server:
    """The server at ``url``, base_url included (e.g. ``http://127.0.0.1:8888/user/alice/``);
    ValueError for anything but an http(s) address."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http(s) address: {url!r}")
    return Server(url.rstrip("/") + "/", token or None)


class _Found(NamedTuple):
    server: Server
    pid: int
    root_dir: Path | None


def discover(runtime_dir: str | os.PathLike[str] | None = None) -> list[Server]:
    """This user's running Jupyter servers, the one that owns the caller first.

    First a server that is this process or an ancestor of it: the server that started this
    kernel, or whose terminal runs this command. Then servers whose root_dir holds the working
    directory, the deepest root first. Then the others, by file name. ``runtime_dir`` defaults
    to the directory of this kernel's connection file (its server's runtime dir, which may be
    configured away from the default), else ``jupyter_runtime_dir()``.

    The token is the one in the server's file; a server file without one (a JupyterHub
    single-user server) gets ``JUPYTERHUB_API_TOKEN``, which such a server accepts.
    """
    directory = Path(runtime_dir) if runtime_dir is not None else _default_runtime_dir()
    if directory is None:
        return []
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("jpserver-") and n.endswith(".json"))
    except OSError:
        return []
    found = [f for f in (_read_server_file(directory / name) for name in names) if f is not None]
    lineage = _lineage()
    here = _resolved(".")

    def rank(f: _Found) -> tuple[int, int]:
        if f.pid in lineage:
            return (0, 0)
        if here is not None and f.root_dir is not None and here.is_relative_to(f.root_dir):
            return (1, -len(f.root_dir.parts))
        return (2, 0)

    return [f.server for f in sorted(found, key=rank)]


def _default_runtime_dir() -> Path | None:
    connection = connection_file()
    if connection is not None:
        return Path(connection).resolve().parent
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:  # torch without Jupyter, e.g. the CLI run from source on a GPU box
        return None
    return Path(jupyter_runtime_dir())


def _read_server_file(path: Path) -> _Found | None:
    """A live server's file of this user; None for anything else (gone, planted, stale, odd)."""
    try:
        info = json.loads(read_own_file(path, MAX_SERVER_FILE_BYTES))
    except (OSError, RefusedFile, ValueError, RecursionError):
        return None
    if not isinstance(info, dict):
        return None
    pid, url, token, root = info.get("pid"), info.get("url"), info.get("token"), info.get("root_dir")
    if not (isinstance(pid, int) and isinstance(url, str) and _serves(pid, url)):
        return None
    try:
        server = server_at(
            url, token if isinstance(token, str) and token else os.environ.get("JUPYTERHUB_API_TOKEN")
        )
    except ValueError:  # e.g. a server on a UNIX socket
        return None
    return _Found(
        dataclasses.replace(server, pid=pid), pid, _resolved(root) if isinstance(root, str) and root else None
    )


def _serves(pid: Any, url: str) -> bool:
    """A running process of this user that listens on the URL's port: a server killed hard
    leaves its file behind, and since then its PID may have gone to another of our processes
    and its port to someone else's listener (which must not get the hub token)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        port = urllib.parse.urlsplit(url).port
        proc = psutil.Process(pid)
        if proc.uids().effective != os.geteuid():
            return False
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in proc.net_connections("inet")
        )
    except (OverflowError, ValueError, psutil.Error):
        return False


def _resolved(path: str) -> Path | None:
    try:
        return Path(path).resolve()
    except (OSError, ValueError, RuntimeError):  # a deleted working directory, a NUL, a link loop
        return None


def _lineage() -> set[int]:
    """This process and its ancestors."""
    me = psutil.Process()
    try:
        return {me.pid, *(p.pid for p in me.parents())}
    except psutil.Error:
        return {me.pid}
