"""The running Jupyter servers, as the doctor sees them: does the extension answer, and how
exposed is the server the kernel belongs to?

The sidebar and status bar need the server side; a kernel can only find out by asking the
running servers (``client.discover``: this kernel's own server first) with a short timeout (a
dead server left a stale file behind more often than not). How exposed that first server is
comes from what it does, not from its config files: requests without the token, from a foreign
``Origin``, a POST without an XSRF token, and the addresses its process listens on.
"""

from __future__ import annotations

import ipaddress
import itertools
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..client import Server, ServerError, discover

ROUTE = "api/gpu/devices"
# Answers 200 to a signed-in caller and refuses a stranger; takes no POST, so a POST that passes
# the XSRF check gets 405 and changes nothing. A well-kept server refuses these requests and logs
# each refusal as a warning (that is what the doctor finds out); the query, which the route
# ignores, says in those log lines what they were.
STATUS_ROUTE = "api/status?jupyter-gpu-doctor=checks-that-strangers-are-refused"
FOREIGN_ORIGIN = "http://jupyter-gpu-doctor.invalid"


@dataclass
class Exposure:
    """What a stranger's requests to the server got."""

    open_to_anyone: bool | None = None  # None: could not tell
    allow_origin: str | None = None  # Access-Control-Allow-Origin sent to a foreign Origin
    xsrf_checked: bool | None = None
    listen: list[str] = field(default_factory=list)  # addresses the server's process listens on
    tls: bool = False


@dataclass
class ServerProbe:
    url: str
    status: int | None = None  # HTTP status, None when no answer came
    error: str | None = None  # what went wrong, address included
    exposure: Exposure | None = None  # only for the first server: the one this kernel belongs to


def _listen_addresses(server: Server) -> list[str]:
    """Where the server's process listens on its URL's port (psutil), e.g. ["0.0.0.0"]."""
    import psutil

    if server.pid is None:
        return []
    port = urllib.parse.urlsplit(server.url).port
    try:
        connections = psutil.Process(server.pid).net_connections("inet")
    except psutil.Error:
        return []
    return sorted(
        {c.laddr.ip for c in connections if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
    )


def beyond_loopback(addresses: list[str]) -> list[str]:
    """The listening addresses another machine could reach (``0.0.0.0`` and ``::`` reach all)."""
    out = []
    for address in addresses:
        try:
            if not ipaddress.ip_address(address.split("%")[0]).is_loopback:
                out.append(address)
        except ValueError:
            out.append(address)
    return out


def probe_exposure(server: Server, timeout: float = 1.0) -> Exposure:
    """Ask ``server`` as a stranger would: without the token, from a foreign origin."""
    exposure = Exposure(listen=_listen_addresses(server), tls=server.url.startswith("https:"))
    try:
        plain = server.send(STATUS_ROUTE, authenticate=False, timeout=timeout)
        # A browser's CORS preflight: answered without the token (a refused GET carries no CORS
        # headers, and a token-authenticated request is allowed from any origin by design).
        foreign = server.send(
            STATUS_ROUTE,
            method="OPTIONS",
            authenticate=False,
            headers={"Origin": FOREIGN_ORIGIN},
            timeout=timeout,
        )
        post = server.send(STATUS_ROUTE, method="POST", authenticate=False, timeout=timeout)
    except ServerError:
        return exposure
    exposure.open_to_anyone = plain.status == 200
    exposure.allow_origin = foreign.headers.get("access-control-allow-origin")
    if post.status == 405:  # got past the XSRF check to the handler, which takes no POST
        exposure.xsrf_checked = False
    elif post.status == 403 and b"_xsrf" in post.body:
        exposure.xsrf_checked = True
    return exposure


def probe_servers(
    find: Callable[[], Iterable[Server]] = discover,
    timeout: float = 1.0,
    limit: int = 5,
) -> list[ServerProbe] | None:
    """GET ``{url}api/gpu/devices`` on each running server, and probe the first one's exposure;
    None if jupyter_server is absent."""
    try:
        import jupyter_server  # noqa: F401 -- only to know whether it is there
    except ImportError:
        return None
    probes: list[ServerProbe] = []
    for server in itertools.islice(find(), limit):
        url = server.url + ROUTE
        try:
            server.get(ROUTE, timeout=timeout)
            probe = ServerProbe(url, status=200)
        except ServerError as error:
            probe = ServerProbe(url, status=error.status, error=str(error))
        if not probes and probe.status is not None:
            probe.exposure = probe_exposure(server, timeout)
        probes.append(probe)
    return probes
