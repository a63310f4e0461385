"""A tiny server extension used only by benchmarks: gives the jupyter_gpu sampler an hour of history.

`GET {base_url}historyfill?seconds=3600` puts copies of the latest sample one interval apart before
it (as `tests/support/long_history.py` does), encoded by the sampler's own `Sample.encode`, so that
a benchmark need not wait an hour. Process memory changes every minute, as a notebook's does.
"""

from __future__ import annotations

import json

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web


class FillHandler(APIHandler):
    auth_resource = "historyfill"

    @web.authenticated
    def get(self) -> None:
        from jupyter_gpu.server.sampler import Sample

        sampler = self.serverapp.extension_manager.extension_points["jupyter_gpu"].app.sampler
        latest = sampler.latest()
        if latest is None:
            raise web.HTTPError(503, "no sample yet")
        count = int(float(self.get_argument("seconds")) / sampler.interval) - 1
        samples = []
        for k in range(count):
            gpus = []
            for gpu in latest.gpus:
                copy = dict(gpu)
                if copy.get("processes"):
                    copy["processes"] = [
                        {**p, "used_memory_bytes": (p["used_memory_bytes"] or 0) + k // 60}
                        for p in copy["processes"]
                    ]
                gpus.append(copy)
            samples.append(Sample.encode(latest.t - (count - k) * sampler.interval, tuple(gpus)))
        with sampler._lock:
            newer = [s for s in sampler._history if s.t >= latest.t]
            sampler._history.clear()
            sampler._history.extend(samples + newer)
            kept = len(sampler._history)
        self.finish(json.dumps({"samples": kept}))


def _jupyter_server_extension_points():
    return [{"module": "historyfill"}]


def _load_jupyter_server_extension(server_app) -> None:
    route = url_path_join(server_app.web_app.settings["base_url"], "historyfill")
    server_app.web_app.add_handlers(".*$", [(route, FillHandler)])
