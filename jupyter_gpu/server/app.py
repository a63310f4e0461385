"""The jupyter_server extension: configuration, lifecycle, routes.

Configure with ``c.GPUMonitor.<trait>`` in ``jupyter_server_config.py`` or
``--GPUMonitor.<trait>=...`` on the command line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Enum, Float, Unicode, default

from ..nvml import NvmlReader
from . import metrics
from .handlers import route_table
from .kernels import KernelView
from .owners import OwnerMemo
from .sampler import Sampler


class GPUMonitor(ExtensionApp):
    """GPU telemetry for Jupyter: one NVML sampler per server, REST under api/gpu/."""

    name = "jupyter_gpu"
    load_other_extensions = True

    backend = Enum(
        ["nvml", "simulated"],
        default_value="nvml",
        config=True,
        help="Where readings come from: 'nvml' (the GPUs of this machine) or 'simulated' "
        "(replays `simulated_readings`; for demos and tests without a GPU, labelled as such).",
    )
    simulated_readings = Unicode(
        config=True,
        help="JSON file of NVML readings replayed by the simulated backend (by default a trace recorded on 2xH200, looping).",
    )
    interval = Float(1.0, min=0.05, config=True, help="Seconds between samples of the fast fields.")
    slow_interval = Float(
        5.0,
        min=0.5,
        config=True,
        help="Seconds between PCIe throughput readings (NVML spends ~20 ms per GPU on each).",
    )
    history_seconds = Float(600.0, min=1.0, config=True, help="How much history the server keeps.")
    retry_interval = Float(
        10.0, min=0.1, config=True, help="Seconds between attempts to start NVML while no GPU is usable."
    )
    metrics_kernel_labels = Enum(
        ["both", "kernel", "notebook", "none"],
        default_value="both",
        config=True,
        help="Which kernel labels the per-kernel series in /metrics carry: 'both' (kernel_id and "
        "notebook_path), 'kernel', 'notebook' or 'none' (per GPU only). Every kernel start makes new "
        "kernel_id series, so set 'notebook' or 'none' to cap the number of series; kernels that then "
        "share labels are summed into one series.",
    )
    show_all_users = Bool(
        False,
        config=True,
        help="List other users' GPU processes with their commands. When False they are only counted.",
    )

    @default("simulated_readings")
    def _default_readings(self) -> str:
        return str(Path(__file__).parent.parent / "nvml" / "h200_2gpu_trace.json")

    @property
    def simulated(self) -> bool:
        return self.backend == "simulated"

    def _reader_factory(self):
        if self.simulated:
            from ..nvml.simulated import SimulatedNVML

            self.simulated_nvml = SimulatedNVML.from_file(self.simulated_readings)
            return lambda: NvmlReader(self.simulated_nvml)
        return NvmlReader

    def initialize_settings(self) -> None:
        self.sampler = Sampler(
            self._reader_factory(),
            interval=self.interval,
            slow_interval=self.slow_interval,
            history_seconds=self.history_seconds,
            retry_interval=self.retry_interval,
            verify_pids=not self.simulated,
            log=self.log,
        )
        assert self.serverapp is not None  # set by jupyter_server before extensions load
        self.kernels = KernelView(
            self.sampler,
            self.serverapp.kernel_manager,
            self.serverapp.session_manager,
            show_all_users=self.show_all_users,
        )
        self.owners = OwnerMemo()
        self._refresh: PeriodicCallback | None = None
        self.sampler.start()
        metrics.attach(self)

    def initialize_handlers(self) -> None:
        self.handlers.extend(route_table(self))

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        # Keeps the kernel attribution that Prometheus reports fresh between API calls.
        self._refresh = PeriodicCallback(self._refresh_kernels, max(self.interval, 5.0) * 1000)
        self._refresh.start()

    async def _refresh_kernels(self) -> None:
        try:
            await self.kernels.refresh()
        except Exception:  # never let a periodic task die silently or spam tracebacks
            self.log.warning("jupyter_gpu: kernel attribution failed", exc_info=True)

    async def stop_extension(self) -> None:
        if self._refresh is not None:
            self._refresh.stop()
        metrics.detach(self)
        await asyncio.get_running_loop().run_in_executor(None, self.sampler.stop)
