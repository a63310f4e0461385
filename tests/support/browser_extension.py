"""Test-only server extension for the browser tests: lets a test put a real kernel's process on a
simulated GPU, make a simulated GPU fall off the bus, make an NVML call fail, or run code in a
kernel, as the server tests do in-process (the browser tests run `jupyter lab` in a subprocess,
so they reach the simulated NVML through these routes instead).

Loaded by module name, ``support.browser_extension``, by the servers that support/browser.py
starts (tests/ is on their PYTHONPATH); never shipped (it lives outside the package).
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web


class AttachHandler(APIHandler):
    """POST {"kernel_id", "gpu_index", "bytes"}: the kernel's process now holds that much memory
    (with "mig_index", on that MIG device of the GPU)."""

    @web.authenticated
    def post(self) -> None:
        body = self.get_json_body() or {}
        nvml = _simulated_nvml(self)
        kernel = self.kernel_manager.get_kernel(body["kernel_id"])
        pid = kernel.provisioner.pid
        device = nvml.readings["devices"][int(body["gpu_index"])]
        if "mig_index" in body:
            device = device["mig_devices"][int(body["mig_index"])]
        device["compute_processes"].append({"pid": pid, "used_gpu_memory": int(body["bytes"])})
        self.finish(json.dumps({"pid": pid}))


class LoseHandler(APIHandler):
    """POST {"gpu_index", "lost"}: the simulated GPU falls off the bus, or comes back."""

    @web.authenticated
    def post(self) -> None:
        body = self.get_json_body() or {}
        nvml = _simulated_nvml(self)
        if body.get("lost", True):
            nvml.lose_gpu(int(body["gpu_index"]))
        else:
            nvml.restore_gpu(int(body["gpu_index"]))
        self.finish("{}")


class FailHandler(APIHandler):
    """POST {"function", "error", "gpu_index"}: that NVML call now raises, e.g. NotSupported."""

    @web.authenticated
    def post(self) -> None:
        import pynvml

        body = self.get_json_body() or {}
        code = getattr(pynvml, body["error"])
        _simulated_nvml(self).fail(body["function"], code, device=body.get("gpu_index"))
        self.finish("{}")


class ExecuteHandler(APIHandler):
    """POST {"kernel_id", "code"}: run code in the kernel as a notebook cell would (no tab needed)."""

    @web.authenticated
    async def post(self) -> None:
        body = self.get_json_body() or {}
        client = self.kernel_manager.get_kernel(body["kernel_id"]).client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=60)
            reply = await client.execute_interactive(body["code"], timeout=60, output_hook=lambda msg: None)
        finally:
            client.stop_channels()
        self.finish(json.dumps({"status": reply["content"]["status"]}))


def _simulated_nvml(handler: APIHandler) -> Any:
    monitor = handler.serverapp.extension_manager.extension_points["jupyter_gpu"].app
    nvml = getattr(monitor, "simulated_nvml", None)
    if nvml is None:
        raise web.HTTPError(409, "the jupyter_gpu backend is not the simulated one")
    return nvml


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "api", "gpu-test", "attach"), AttachHandler),
            (url_path_join(base, "api", "gpu-test", "lose"), LoseHandler),
            (url_path_join(base, "api", "gpu-test", "fail"), FailHandler),
            (url_path_join(base, "api", "gpu-test", "execute"), ExecuteHandler),
        ],
    )
