"""The jupyter_server extension: configuration, lifecycle, routes.

Configure with ``c.GPUMonitor.<trait>`` in ``jupyter_server_config.py`` or
``--GPUMonitor.<trait>=...`` on the command line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pynvml
from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Enum, Float, Int, Unicode, default

from ..analysis.idle import CullPolicy
from ..nvml import NvmlReader
from ..nvml.xid_events import XidWatcher
from . import metrics
from .culler import Culler
from .exits import ExitLog
from .handlers import route_table
from .kernels import KernelView, notebook_paths
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
        help="JSON file of NVML readings replayed by the simulated backend, looping (by default "
        "jupyter_gpu/nvml/h200_trace.json: 2.5 minutes recorded on one H200 during a PyTorch training run).",
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

    idle_after = Float(
        900.0,
        min=0.0,
        config=True,
        help="Seconds a kernel must sit idle before it is flagged as idle on GPU memory "
        "(`idle_holding` in api/gpu/kernels, marked in the panel and in `jupyter gpu status`).",
    )
    idle_min_memory = Int(
        1024**3,
        min=0,
        config=True,
        help="Bytes of GPU memory an idle kernel must hold to be flagged.",
    )
    cull_idle_after = Float(
        0.0,
        min=0.0,
        config=True,
        help="Shut down kernels idle this many seconds while holding at least `cull_min_memory` "
        "bytes of GPU memory; 0 (the default) turns the GPU-aware culler off. Busy kernels are never culled.",
    )
    cull_min_memory = Int(
        1024**3,
        min=0,
        config=True,
        help="Bytes of GPU memory an idle kernel must hold to be culled; 0 culls any idle kernel.",
    )
    cull_warn_before = Float(
        300.0,
        min=0.0,
        config=True,
        help="Seconds before a cull when the owner is warned (a JupyterLab notification and a log "
        "line); 0 for no warning.",
    )
    cull_connected = Bool(
        False,
        config=True,
        help="Cull idle kernels that still have open connections (e.g. a notebook tab). Off, as "
        "jupyter_server's own `cull_connected`.",
    )
    cull_interval = Float(
        60.0, min=0.1, config=True, help="Seconds between the culler's checks of the kernels."
    )

    @default("simulated_readings")
    def _default_readings(self) -> str:
        return str(Path(__file__).parent.parent / "nvml" / "h200_trace.json")

    @property
    def simulated(self) -> bool:
        return self.backend == "simulated"

    @property
    def cull_policy(self) -> CullPolicy:
        return CullPolicy(
            self.cull_idle_after, self.cull_min_memory, self.cull_warn_before, self.cull_connected
        )

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
            idle_after=self.idle_after,
            idle_min_memory=self.idle_min_memory,
            cull_policy=self.cull_policy,
        )
        self.culler = (
            Culler(
                self.kernels,
                self.serverapp.kernel_manager,
                self.serverapp.event_logger,
                self.cull_policy,
                self.log,
            )
            if self.cull_policy.enabled
            else None
        )
        self.owners = OwnerMemo()
        sessions = self.serverapp.session_manager
        self.exits = ExitLog(
            self.serverapp.kernel_manager,
            self.serverapp.event_logger,
            self.log,
            lambda: notebook_paths(sessions),
            self.kernels.running_cell,
        )
        # GPU errors on a thread of their own, straight into the exit log
        self._xids = XidWatcher(self.exits.xid, self.simulated_nvml if self.simulated else pynvml)
        self._xids.start()
        self._refresh: PeriodicCallback | None = None
        self._cull: PeriodicCallback | None = None
        self.sampler.start()
        metrics.attach(self)

    def initialize_handlers(self) -> None:
        self.handlers.extend(route_table(self))

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        # Keeps the kernel attribution that Prometheus reports fresh between API calls.
        self._refresh = PeriodicCallback(self._refresh_kernels, max(self.interval, 5.0) * 1000)
        self._refresh.start()
        if self.culler is not None:
            self._cull = PeriodicCallback(self._cull_kernels, self.cull_interval * 1000)
            self._cull.start()

    async def _refresh_kernels(self) -> None:
        try:
            view = await self.kernels.refresh()
            await self.exits.update(view["kernels"])
        except Exception:  # never let a periodic task die silently or spam tracebacks
            self.log.warning("jupyter_gpu: kernel attribution failed", exc_info=True)

    async def _cull_kernels(self) -> None:
        assert self.culler is not None
        try:
            await self.culler.check()
        except Exception:
            self.log.warning("jupyter_gpu: the GPU culler's check failed", exc_info=True)

    async def stop_extension(self) -> None:
        for periodic in (self._refresh, self._cull):
            if periodic is not None:
                periodic.stop()
        metrics.detach(self)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._xids.stop)
        await loop.run_in_executor(None, self.sampler.stop)
