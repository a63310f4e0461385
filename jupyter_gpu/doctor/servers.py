"""Is the jupyter_gpu server extension reachable from here?

The sidebar and status bar need the server side; a kernel can only find out by asking the
running servers (``client.discover``: this kernel's own server first) with a short timeout (a
dead server left a stale file behind more often than not).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..client import Server, ServerError, discover

ROUTE = "api/gpu/devices"


@dataclass
class ServerProbe:
    url: str
    status: int | None = None  # HTTP status, None when no answer came
    error: str | None = None  # what went wrong, address included


def probe_servers(
    find: Callable[[], Iterable[Server]] = discover,
    timeout: float = 1.0,
    limit: int = 5,
) -> list[ServerProbe] | None:
    """GET ``{url}api/gpu/devices`` on each running server; None if jupyter_server is absent."""
    try:
        import jupyter_server  # noqa: F401 -- only to know whether it is there
    except ImportError:
        return None
    probes = []
    for server in itertools.islice(find(), limit):
        url = server.url + ROUTE
        try:
            server.get(ROUTE, timeout=timeout)
            probes.append(ServerProbe(url, status=200))
        except ServerError as error:
            probes.append(ServerProbe(url, status=error.status, error=str(error)))
    return probes
