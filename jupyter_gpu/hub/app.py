"""``python -m jupyter_gpu.hub``: the instructor's view, a JupyterHub managed service.

The Hub starts it with its address, prefix and token in the environment
(``JUPYTERHUB_SERVICE_URL``, ``JUPYTERHUB_SERVICE_PREFIX``, ``JUPYTERHUB_API_URL``,
``JUPYTERHUB_API_TOKEN``). The Hub does not tell services where its proxy listens, and the
user servers are reached through it, so ``--proxy-url`` says so (default: the origin of
``JUPYTERHUB_PUBLIC_URL`` when the Hub sets one).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import urllib.parse
from collections.abc import Sequence
from typing import Any

from jupyterhub.services.auth import HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web

from ..client import server_at
from .fleet import Hub, node_gpus
from .handlers import Builder, KernelsHandler, PageHandler, ShutdownKernelHandler, StopServerHandler
from .page import environment
from .server_culler import ServerCuller

# Under the page's 2 s: every server is asked at once, so this is the page's worst wait.
DEFAULT_TIMEOUT = 1.5


def make_app(
    hub: Hub,
    prefix: str,
    *,
    cookie_secret: bytes,
    node: Sequence[dict[str, Any]],
    culler: ServerCuller | None = None,
    hub_template_paths: Sequence[str] = (),
) -> web.Application:
    builder = Builder(hub, node, culler)
    kwargs = {"hub": hub, "builder": builder}
    return web.Application(
        [
            (prefix, PageHandler, kwargs),
            (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
            (url_path_join(prefix, "api/kernels"), KernelsHandler, kwargs),
            (url_path_join(prefix, "api/shutdown-kernel"), ShutdownKernelHandler, kwargs),
            (url_path_join(prefix, "api/stop-server"), StopServerHandler, kwargs),
        ],
        jinja=environment(hub_template_paths),
        cookie_secret=cookie_secret,
    )


def _default_proxy_url() -> str | None:
    public = os.environ.get("JUPYTERHUB_PUBLIC_URL")
    if not public:
        return None
    parts = urllib.parse.urlsplit(public)
    return f"{parts.scheme}://{parts.netloc}"


def parser() -> argparse.ArgumentParser:
    """The service's command line (also read by the docs' reference page)."""
    p = argparse.ArgumentParser(prog="python -m jupyter_gpu.hub", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--proxy-url",
        default=_default_proxy_url(),
        help="where this service reaches JupyterHub's proxy, e.g. http://127.0.0.1:8000",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for each user server (default {DEFAULT_TIMEOUT})",
    )
    p.add_argument(
        "--cull-idle-servers",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="stop a user server whose kernels have all been idle this long (or that has had none "
        "this long), whatever tabs are open; never one with a busy kernel or that cannot be read (0: off)",
    )
    p.add_argument(
        "--cull-warn-before",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="log a warning, and show it on the page, this long before a server is stopped (default 60)",
    )
    p.add_argument(
        "--hub-template-path",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of the Hub's custom templates (its c.JupyterHub.template_paths), so the page "
        "follows them; give it once per folder",
    )
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    command = parser()
    args = command.parse_args(argv)
    if args.cull_idle_servers < 0 or args.cull_warn_before < 0:
        command.error("--cull-idle-servers and --cull-warn-before take seconds, 0 or more")
    if not args.proxy_url:
        command.error("--proxy-url is needed: the Hub does not tell services where its proxy listens")
    if not args.timeout > 0:
        command.error("--timeout must be a positive number of seconds")
    return args


async def serve(argv: list[str]) -> None:
    args = parse_args(argv)
    env = os.environ
    missing = [
        name
        for name in (
            "JUPYTERHUB_SERVICE_URL",
            "JUPYTERHUB_SERVICE_PREFIX",
            "JUPYTERHUB_API_URL",
            "JUPYTERHUB_API_TOKEN",
        )
        if not env.get(name)
    ]
    if missing:
        sys.exit(
            f"{', '.join(missing)} not set: run this as a JupyterHub managed service (see the docs' JupyterHub guide)"
        )
    hub = Hub(
        server_at(env["JUPYTERHUB_API_URL"], env["JUPYTERHUB_API_TOKEN"]),
        args.proxy_url,
        timeout=args.timeout,
    )
    # The node's GPUs do not change while it runs: read once, what students' claims are held to.
    node = await asyncio.to_thread(node_gpus)
    # OAuth state cookies are signed; the secret is per process (a restart logs people in again).
    culler = (
        ServerCuller(hub, args.cull_idle_servers, args.cull_warn_before) if args.cull_idle_servers else None
    )
    app = make_app(
        hub,
        env["JUPYTERHUB_SERVICE_PREFIX"],
        cookie_secret=os.urandom(32),
        node=node,
        culler=culler,
        hub_template_paths=args.hub_template_path,
    )
    listen = urllib.parse.urlsplit(env["JUPYTERHUB_SERVICE_URL"])
    app.listen(listen.port or 80, listen.hostname or "127.0.0.1", xheaders=True)
    logging.getLogger("jupyter_gpu.hub").info(
        "jupyter-gpu service at %s%s, user servers through %s",
        env["JUPYTERHUB_SERVICE_URL"],
        env["JUPYTERHUB_SERVICE_PREFIX"],
        args.proxy_url,
    )
    if culler is not None:
        await culler.run()
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    try:
        asyncio.run(serve(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # the Hub stops its services with SIGINT
        pass
