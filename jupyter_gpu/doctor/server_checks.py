"""Checks of the Jupyter server this kernel belongs to: does the GPU extension answer, and is
the server open to others? A notebook server runs code as its user, so whoever reaches it
without a token, or any web page its user visits while it answers foreign origins or skips the
XSRF check, can run code as that user. Each exposure finding comes from what the server did when
asked as a stranger (``servers.probe_exposure``) and names the config line that closes it.
"""

from __future__ import annotations

from collections.abc import Callable

from .check import Check, Status
from .facts import Facts
from .servers import ROUTE, Exposure, beyond_loopback

ORIGIN = "Jupyter server allow_origin"
XSRF = "Jupyter server XSRF check"
CONFIG = "in `jupyter_server_config.py` (or as `--ServerApp.…` on its command line), then restart the server"


def _probed(f: Facts, known: Callable[[Exposure], object]) -> tuple[str, Exposure] | None:
    """(the server's address, what the probe found) when the probe found out ``known``."""
    if not f.servers or f.servers[0].exposure is None or known(f.servers[0].exposure) in (None, []):
        return None
    return f.servers[0].url.removesuffix(ROUTE), f.servers[0].exposure


def check_server(f: Facts) -> Check | None:
    title = "jupyter_gpu server extension"
    if f.servers is None:
        return None
    if not f.servers:
        return Check(
            "server",
            title,
            Status.INFO,
            "no running Jupyter server found from here (a plain IPython, or a remote kernel)",
        )
    if any(s.status == 200 for s in f.servers):
        url = next(s.url for s in f.servers if s.status == 200)
        return Check("server", title, Status.OK, f"reachable: {url}")
    s = f.servers[0]
    if s.status == 404:
        return Check(
            "server",
            title,
            Status.WARN,
            f"the server answers but has no GPU routes ({s.url} → 404)",
            fix="`jupyter server extension enable jupyter_gpu`, then restart the server "
            "(`jupyter server extension list` shows whether it loaded).",
        )
    if s.status in (401, 403):
        return Check(
            "server",
            title,
            Status.WARN,
            f"the server refused this kernel's token ({s.url} → {s.status})",
            fix="Open the notebook from that server, or check its authentication settings.",
        )
    # The client's error names the address itself, e.g. "cannot reach http://…: Connection refused".
    what = s.error or f"could not reach {s.url}: HTTP {s.status}"
    return Check(
        "server",
        title,
        Status.WARN,
        what,
        fix="A stopped server may have left its runtime file behind; `jupyter server list` shows which run.",
    )


def check_server_auth(f: Facts) -> Check | None:
    found = _probed(f, lambda e: e.open_to_anyone)
    if found is None:
        return None
    where, e = found
    title = "Jupyter server authentication"
    if not e.open_to_anyone:
        return Check("server_auth", title, Status.OK, f"{where} asks for a token or password")
    reach = beyond_loopback(e.listen)
    who = (
        f"anyone who can reach this machine (it listens on {', '.join(reach)})"
        if reach
        else "every user of this machine"
    )
    return Check(
        "server_auth",
        title,
        Status.FAIL,
        f"{where} has no token and no password: {who} can run code as you",
        fix="Remove the empty token (`--IdentityProvider.token=''` / `c.ServerApp.token = ''`): "
        "`c.IdentityProvider.token = '<a long random string>'` (or leave it unset for a generated one), "
        f"or set a password with `jupyter server password`; {CONFIG}.",
    )


def check_server_tls(f: Facts) -> Check | None:
    found = _probed(f, lambda e: e.listen)
    if found is None:
        return None
    where, e = found
    reach = beyond_loopback(e.listen)
    title = "Jupyter server network exposure"
    if not reach or e.tls:
        how = f"on {', '.join(reach)} over TLS" if reach else f"on loopback only ({', '.join(e.listen)})"
        return Check("server_tls", title, Status.OK, f"listens {how}")
    return Check(
        "server_tls",
        title,
        Status.WARN,
        f"{where} listens on {', '.join(reach)} without TLS: the token and everything the "
        "notebooks show cross the network in clear text",
        fix="Listen on loopback and reach it through SSH (`c.ServerApp.ip = '127.0.0.1'`, then "
        "`ssh -L 8888:localhost:8888 host`), or serve TLS: `c.ServerApp.certfile = '/path/cert.pem'` "
        f"and `c.ServerApp.keyfile = '/path/key.pem'`; {CONFIG}.",
    )


def check_server_origin(f: Facts) -> Check | None:
    found = _probed(f, lambda e: e.open_to_anyone)
    if found is None:
        return None
    where, e = found
    if e.allow_origin is None:
        return Check("server_origin", ORIGIN, Status.OK, "foreign web pages get no CORS permission")
    what = "'*'" if e.allow_origin == "*" else f"any origin (it allowed {e.allow_origin})"
    return Check(
        "server_origin",
        ORIGIN,
        Status.FAIL if e.open_to_anyone else Status.WARN,
        f"{where} lets {what} call it from a browser: any web page you visit can use it"
        + (", and with no token it can run code" if e.open_to_anyone else ""),
        fix="`c.ServerApp.allow_origin = ''` (the default), or only the front end that needs it, e.g. "
        f"`c.ServerApp.allow_origin = 'https://lab.example.org'` (and no `allow_origin_pat`); {CONFIG}.",
    )


def check_server_xsrf(f: Facts) -> Check | None:
    found = _probed(f, lambda e: e.xsrf_checked)
    if found is None:
        return None
    where, e = found
    if e.xsrf_checked:
        return Check("server_xsrf", XSRF, Status.OK, "a POST without an XSRF token is refused")
    return Check(
        "server_xsrf",
        XSRF,
        Status.WARN,
        f"{where} accepts a POST without an XSRF token (disable_check_xsrf): a web page you "
        "visit while logged in can start kernels and run code through your browser",
        fix=f"`c.ServerApp.disable_check_xsrf = False` (the default); {CONFIG}. Scripts send the token "
        "in an `Authorization` header, which needs no XSRF token.",
    )
