"""The Jupyter server's simulated readings, read the way ``%gpu_monitor`` reads NVML.

Where the kernel has no usable NVML but its Jupyter server runs the simulated backend (a demo or
a workshop laptop without a GPU), ``%gpu_monitor`` can still be tried: this reader answers the
subset of ``NvmlReader`` the monitor uses from the server's ``api/gpu/devices`` and
``api/gpu/telemetry`` (the newest sample only), through the one client. It is only ever used for
a server that says its readings are simulated, and the monitor marks them so.
"""

from __future__ import annotations

import time
from typing import Any

from ..client import Server, ServerError, discover
from ..nvml import GpuLost

TIMEOUT = 2.0


class ServerReader:
    simulated = True

    def __init__(self, server: Server, devices: list[dict[str, Any]]) -> None:
        self.server = server
        self.devices = devices
        self._latest: dict[int, dict[str, Any]] = {}
        self._read_at = 0.0

    @classmethod
    def of_simulated_server(cls) -> ServerReader | None:
        """A reader of this kernel's server, if it can be asked and its readings are simulated."""
        servers = discover()
        if not servers:
            return None
        try:
            reply = servers[0].get("api/gpu/devices", timeout=TIMEOUT)
        except ServerError:
            return None
        if not reply.get("simulated") or not reply.get("available"):
            return None
        return cls(servers[0], reply["devices"])

    def open(self) -> int:
        return len(self.devices)

    def device_info(self, index: int) -> tuple[dict[str, Any], dict[str, str]]:
        device = self.devices[index]
        return {k: v for k, v in device.items() if k != "unsupported"}, device.get("unsupported", {})

    def fast(self, index: int) -> tuple[dict[str, Any], dict[str, str]]:
        """The server's newest sample of one GPU (one request per update of all the GPUs)."""
        if time.monotonic() - self._read_at > 0.05:
            # `since` in the future: the latest sample without the history
            reply = self.server.get(f"api/gpu/telemetry?since={time.time() + 3600:.0f}", timeout=TIMEOUT)
            latest = reply.get("latest") or {"gpus": []}
            self._latest = {g["index"]: g for g in latest["gpus"]}
            self._read_at = time.monotonic()
        gpu = self._latest.get(self.devices[index]["index"])
        if gpu is None or gpu["state"] != "ok":
            raise GpuLost((gpu or {}).get("error") or f"GPU {index} is not in the server's readings")
        return gpu, gpu.get("unsupported", {})

    def forget(self, index: int) -> None:
        """Nothing to release: the server keeps its own NVML."""

    def close(self) -> None:
        """Nothing to release."""
