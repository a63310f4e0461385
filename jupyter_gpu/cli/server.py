"""Ask a Jupyter server's ``api/gpu/*`` routes: one named by URL, or one found running here.

A server knows what NVML alone cannot: which kernel, and so which notebook, a GPU process
belongs to. Requests go through ``jupyter_gpu.client`` (no proxy, no redirect, bounded replies);
this module turns its failures into one line with the fix.
"""

from __future__ import annotations

from typing import Any

from ..client import TIMEOUT, Server, ServerError, discover, server_at
from .common import EXIT_USAGE, CliError

DISCOVERY_LIMIT = 5  # stale server files pile up; never try them all


def get(server: Server, route: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """GET ``{url}api/gpu/<route>`` as JSON; ``CliError`` with the fix when it fails."""
    try:
        return server.get("api/gpu/" + route, timeout=timeout)
    except ServerError as error:
        if error.status in (401, 403):
            raise CliError(
                f"{server.url} refused the request (HTTP {error.status}): pass the server's token "
                "with --token (the ?token= part of the URL it printed), or set JUPYTER_TOKEN"
            ) from None
        if error.status == 404:
            raise CliError(
                f"{server.url} has no jupyter_gpu API (HTTP 404): enable the server extension "
                "(`jupyter server extension enable jupyter_gpu`) and restart the server"
            ) from None
        raise CliError(str(error)) from None


def server_from_url(url: str, token: str | None) -> Server:
    """The server the user named; the URL includes any base_url, e.g. ``…/user/alice/``."""
    try:
        return server_at(url, token)
    except ValueError:
        raise CliError(
            f"--url {url!r}: give the server's address, e.g. http://127.0.0.1:8888/", EXIT_USAGE
        ) from None


def find_server() -> tuple[Server | None, list[str]]:
    """The running server that owns this shell (see ``client.discover``) whose ``api/gpu/devices``
    answers, and notes on those that did not."""
    notes = []
    for server in discover()[:DISCOVERY_LIMIT]:
        try:
            get(server, "devices", timeout=1.0)
        except CliError as error:
            notes.append(f"skipped {error}")
            continue
        return server, notes
    return None, notes
