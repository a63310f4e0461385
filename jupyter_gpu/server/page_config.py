"""The latest telemetry sample in the page's settings, so that the status bar shows GPU figures
as JupyterLab (or Notebook 7) starts, before its first request to api/gpu/ returns (#32).

jupyterlab_server and Notebook 7 build every page's ``page_config`` (the JSON in its
``jupyter-config-data`` script) and then call the web app's ``page_config_hook``; ours adds
``jupyterGpuTelemetry``: the body of a ``GET api/gpu/telemetry?since=<latest t>`` reply (the latest
sample, no history), without ``owners`` (the status bar needs none; the first poll brings them).
It is assembled from the sampler's already-encoded latest sample: no NVML call, nothing slow on the
event loop.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from .handlers import AUTH_RESOURCE
from .telemetry import telemetry_json

if TYPE_CHECKING:
    from tornado.web import RequestHandler

    from .app import GPUMonitor

PAGE_CONFIG_KEY = "jupyterGpuTelemetry"
# A page is sent on every load; a sample bigger than this (hundreds of GPU processes) is left to the
# first poll rather than fattening every page.
MAX_BYTES = 64 * 1024

PageConfigHook = Callable[["RequestHandler", dict[str, Any]], dict[str, Any]]


def install(monitor: GPUMonitor, settings: MutableMapping[str, Any]) -> None:
    """Set the web app's ``page_config_hook`` to ours, chaining the one already set (JupyterHub's
    single-user server sets one, which puts the Hub's token in the page)."""
    chained: PageConfigHook | None = settings.get("page_config_hook")

    def hook(handler: RequestHandler, page_config: dict[str, Any]) -> dict[str, Any]:
        if chained is not None:
            page_config = chained(handler, page_config)
        body = latest_telemetry(monitor, handler)
        if body is not None:
            page_config[PAGE_CONFIG_KEY] = body
        return page_config

    settings["page_config_hook"] = hook


def latest_telemetry(monitor: GPUMonitor, handler: RequestHandler) -> str | None:
    """The latest sample as the telemetry route would send it to this page's user, or None when
    there is nothing to say yet, the user may not read api/gpu/, or anything is amiss: a page must
    load whatever state the sampler is in (the frontend then waits for its first poll)."""
    try:
        if not _may_read(handler):
            return None
        sampler = monitor.sampler
        status, latest = sampler.status, sampler.latest()
        if status.state == "starting" or (status.available and latest is None):
            return None
        body = telemetry_json(
            status,
            latest,
            (),
            simulated=monitor.simulated,
            interval=sampler.interval,
            now=time.time(),
            owners=[],
        )
    except Exception:  # never a broken page for want of a figure
        monitor.log.warning("jupyter_gpu: no telemetry in the page's settings", exc_info=True)
        return None
    return body if len(body) <= MAX_BYTES else None


def _may_read(handler: Any) -> bool:
    """What ``@authorized`` asks of the telemetry route (a GET: 'read' on 'gpu'). An authorizer
    that answers asynchronously cannot be waited for in this synchronous hook: no figures then."""
    user = handler.current_user
    if not user:
        return False
    allowed = handler.authorizer.is_authorized(handler, user, "read", AUTH_RESOURCE)
    if inspect.isawaitable(allowed):
        if inspect.iscoroutine(allowed):
            allowed.close()
        return False
    return bool(allowed)
