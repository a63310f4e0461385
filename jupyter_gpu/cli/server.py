"""Ask a Jupyter server's ``api/gpu/*`` routes: one named by URL, or one found running here.

A server knows what NVML alone cannot: which kernel, and so which notebook, a GPU process
belongs to. Servers found in the runtime directory are asked without any proxy (their token
must not travel through one); a URL given on the command line is asked like any other URL.
"""
from __future__ import annotations

import itertools
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .common import EXIT_USAGE, CliError

TIMEOUT = 5.0
MAX_BODY = 16 * 1024 * 1024
DISCOVERY_LIMIT = 5  # stale server files pile up; never try them all


@dataclass
class Server:
    url: str  # base URL, base_url included, ending in "/"
    token: str | None
    discovered: bool  # found in the runtime directory rather than given with --url

    def get(self, route: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        """GET ``{url}api/gpu/<route>`` as JSON; ``CliError`` with the fix when it fails."""
        request = urllib.request.Request(self.url + "api/gpu/" + route)
        if self.token:
            request.add_header("Authorization", f"token {self.token}")
        handlers = [urllib.request.ProxyHandler({})] if self.discovered else []
        try:
            with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as response:
                body = json.loads(response.read(MAX_BODY))
        except urllib.error.HTTPError as error:
            raise CliError(self._http_error(error.code)) from None
        except (urllib.error.URLError, OSError) as error:
            raise CliError(f"cannot reach {self.url}: {getattr(error, 'reason', error)}") from None
        except ValueError:
            raise CliError(f"{self.url}api/gpu/{route} did not answer with JSON") from None
        if not isinstance(body, dict):
            raise CliError(f"{self.url}api/gpu/{route} answered with unexpected JSON")
        return body

    def _http_error(self, code: int) -> str:
        if code in (401, 403):
            return (f"{self.url} refused the request (HTTP {code}): pass the server's token with "
                    "--token (the ?token= part of the URL it printed), or set JUPYTER_TOKEN")
        if code == 404:
            return (f"{self.url} has no jupyter_gpu API (HTTP 404): enable the server extension "
                    "(`jupyter server extension enable jupyter_gpu`) and restart the server")
        return f"{self.url} answered HTTP {code}"


def server_from_url(url: str, token: str | None) -> Server:
    """The server the user named; the URL includes any base_url, e.g. ``…/user/alice/``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CliError(f"--url {url!r}: give the server's address, e.g. http://127.0.0.1:8888/", EXIT_USAGE)
    return Server(url.rstrip("/") + "/", token, discovered=False)


def _running_servers() -> Iterable[dict[str, Any]]:
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:  # a machine with torch but no Jupyter: nothing to find
        return []
    return list_running_servers()


def find_server(
    list_servers: Callable[[], Iterable[dict[str, Any]]] = _running_servers,
) -> tuple[Server | None, list[str]]:
    """The first running server whose ``api/gpu/devices`` answers, and notes on those that did not.

    Under JupyterHub the server file holds no token; the single-user environment's
    ``JUPYTERHUB_API_TOKEN`` is accepted by the server instead.
    """
    notes = []
    for info in itertools.islice(list_servers(), DISCOVERY_LIMIT):
        url = info.get("url")
        if not isinstance(url, str):
            continue
        token = info.get("token") or os.environ.get("JUPYTERHUB_API_TOKEN")
        server = Server(url.rstrip("/") + "/", token, discovered=True)
        try:
            server.get("devices", timeout=1.0)
        except CliError as error:
            notes.append(f"skipped {error}")
            continue
        return server, notes
    return None, notes
