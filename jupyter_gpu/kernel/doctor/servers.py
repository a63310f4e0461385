"""Is the jupyter_gpu server extension reachable from here?

The sidebar and status bar need the server side; a kernel can only find out by asking the
servers listed in the Jupyter runtime directory, with their tokens and a short timeout (a dead
server left a stale file behind more often than not).
"""
from __future__ import annotations

import itertools
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterable

ROUTE = "api/gpu/devices"


@dataclass
class ServerProbe:
    url: str
    status: int | None = None  # HTTP status, None when no answer came
    error: str | None = None


def _running_servers() -> Iterable[dict[str, Any]]:
    from jupyter_server.serverapp import list_running_servers

    return list_running_servers()


def probe_servers(
    list_servers: Callable[[], Iterable[dict[str, Any]]] | None = None,
    timeout: float = 1.0,
    limit: int = 5,
) -> list[ServerProbe] | None:
    """GET ``{url}api/gpu/devices`` on each running server; None if jupyter_server is absent."""
    if list_servers is None:
        try:
            import jupyter_server.serverapp  # noqa: F401 -- only to know whether it is there
        except ImportError:
            return None
        list_servers = _running_servers
    # Local servers only: a proxy from the environment must not see the token.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    probes = []
    for info in itertools.islice(list_servers(), limit):
        url = info["url"].rstrip("/") + "/" + ROUTE
        request = urllib.request.Request(url)
        if info.get("token"):
            request.add_header("Authorization", f"token {info['token']}")
        try:
            with opener.open(request, timeout=timeout) as response:
                probes.append(ServerProbe(url, status=response.status))
        except urllib.error.HTTPError as error:
            probes.append(ServerProbe(url, status=error.code))
        except (urllib.error.URLError, OSError) as error:
            probes.append(ServerProbe(url, error=str(getattr(error, "reason", error))))
    return probes
