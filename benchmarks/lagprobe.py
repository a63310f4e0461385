"""A tiny server extension used only by benchmarks: measures the tornado event loop's lag.

Every 10 ms a callback notes how late it ran. `GET {base_url}lagprobe` returns the lags since
the last call and the CPU time the jupyter_gpu sampler threads spent (when it is loaded).
"""

from __future__ import annotations

import json
import time

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.ioloop import IOLoop

PERIOD = 0.01


class Probe:
    def __init__(self) -> None:
        self.lags: list[float] = []
        self.started = time.monotonic()
        self.expected = time.monotonic() + PERIOD
        IOLoop.current().call_later(PERIOD, self.tick)

    def tick(self) -> None:
        now = time.monotonic()
        self.lags.append(max(0.0, now - self.expected))
        self.expected = now + PERIOD
        IOLoop.current().call_later(PERIOD, self.tick)

    def drain(self) -> list[float]:
        lags, self.lags = self.lags, []
        return lags


class LagHandler(APIHandler):
    auth_resource = "lagprobe"

    def initialize(self, probe: Probe) -> None:
        self.probe = probe

    @web.authenticated
    def get(self) -> None:
        points = self.serverapp.extension_manager.extension_points
        gpu = points.get("jupyter_gpu")
        sampler = getattr(getattr(gpu, "app", None), "sampler", None)
        self.finish(
            json.dumps(
                {
                    "lags": self.probe.drain(),
                    "sampler_cpu_seconds": sampler.cpu_seconds if sampler else None,
                    "uptime": time.monotonic() - self.probe.started,
                }
            )
        )


def _jupyter_server_extension_points():
    return [{"module": "lagprobe"}]


async def _start_jupyter_server_extension(server_app) -> None:
    probe = Probe()
    route = url_path_join(server_app.web_app.settings["base_url"], "lagprobe")
    server_app.web_app.add_handlers(".*$", [(route, LagHandler, {"probe": probe})])


def _load_jupyter_server_extension(server_app) -> None:
    """Handlers are added once the loop runs (the probe needs it)."""
