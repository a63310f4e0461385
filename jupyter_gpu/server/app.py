"""The jupyter_server extension: configuration, lifecycle, routes.

Configure with ``c.GPUMonitor.<trait>`` in ``jupyter_server_config.py`` or
``--GPUMonitor.<trait>=...`` on the command line.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Enum, Float, Int, TraitError, Unicode, default, validate

from ..analysis.alloc_conf import LIMIT_ENV
from ..analysis.idle import CullPolicy
from ..nvml import NvmlReader
from ..nvml.reader import GpuLost, NvmlUnavailable
from ..nvml.xid_events import XidWatcher
from . import kernel_env, metrics
from .culler import Culler
from .exits import ExitLog
from .full_history import FullHistory
from .gpu_assignment import GpuAssigner, parse_assign
from .handlers import route_table
from .kernel_env import Quota
from .kernels import KernelView, notebook_paths
from .notices import StopNotices
from .owners import OwnerMemo
from .page_config import install as install_page_config
from .quota_watch import QuotaWatch
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
        "jupyter_gpu/nvml/h200_trace.json: 130 s recorded on one H200 during a PyTorch training run, GPM's figures included).",
    )
    interval = Float(1.0, min=0.05, config=True, help="Seconds between samples of the fast fields.")
    slow_interval = Float(
        5.0,
        min=0.5,
        config=True,
        help="Seconds between readings of PCIe throughput (NVML spends ~20 ms per GPU on each), the "
        "energy counter and the memory error counts.",
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
    kernel_memory_limit = Int(
        0,
        min=0,
        config=True,
        help="Bytes of GPU memory each kernel this server starts may hold through PyTorch (on every "
        "GPU), as the allocator's per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF; 0 (the "
        f"default) for none. Defaults to ${LIMIT_ENV}, which a Hub's spawner may set per user.",
    )

    assign_gpus = Unicode(
        "none",
        config=True,
        help="GPUs for each new kernel: 'none' (the default: every kernel sees every GPU), "
        "'least_used' (CUDA_VISIBLE_DEVICES set, by UUID, to the GPU or MIG device with the most "
        "free memory, counting kernels already sent there and still starting) or 'least_used:N' (N of them).",
    )

    @validate("assign_gpus")
    def _check_assign(self, proposal: Any) -> str:
        try:
            parse_assign(proposal.value)
        except ValueError as error:
            raise TraitError(f"c.GPUMonitor.assign_gpus: {error}") from None
        return proposal.value

    def _devices_now(self) -> list[dict[str, Any]] | None:
        """Each device's static facts with its latest sample (free memory), for the assigner;
        None while the sampler has not read NVML yet."""
        status, latest = self.sampler.status, self.sampler.latest()
        if status.state == "starting" or (status.available and latest is None):
            return None
        if latest is None:
            return []
        static = {d["index"]: d for d in status.devices}
        return [{**static.get(g["index"], {}), **g} for g in latest.gpus]

    mps_memory_limit = Bool(
        False,
        config=True,
        help="Also give each kernel the quota as NVIDIA MPS's hard limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT): "
        "where an MPS control daemon runs, an allocation over it fails whatever library makes it.",
    )
    over_limit_grace = Float(
        30.0,
        min=0.0,
        config=True,
        help="Seconds a kernel's process tree may hold more GPU memory than kernel_memory_limit (as NVML "
        "counts it: memory PyTorch does not govern, child processes) before over_limit_action.",
    )
    over_limit_headroom = Int(
        2**30,
        min=0,
        config=True,
        help="Bytes a kernel may hold beyond kernel_memory_limit, as NVML counts it, before the watch "
        "acts: the CUDA context (~0.5 GiB on an H200) and libraries' workspaces, which PyTorch's "
        "limit leaves out by design.",
    )
    over_limit_action = Enum(
        ["warn", "interrupt", "restart", "shutdown"],
        "warn",
        config=True,
        help="What a kernel over its quota for over_limit_grace seconds gets: a notification ('warn'), "
        "or also an interrupt, a restart or a shutdown (through jupyter_server's kernel manager).",
    )

    @default("kernel_memory_limit")
    def _limit_from_environment(self) -> int:
        text = os.environ.get(LIMIT_ENV, "").strip()
        if not text:
            return 0
        if not text.isdigit():
            raise TraitError(f"{LIMIT_ENV}={text!r} in the server's environment is not a number of bytes")
        return int(text)

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

    def _kernel_environment(self, reader_factory: Callable[[], NvmlReader]) -> tuple[Quota | None, int]:
        """The kernels' memory quota and GPUs per kernel, checked against the GPUs at start: a
        limit no GPU has, or more GPUs than there are, is a configuration error, never a silent
        default."""
        limit, per_kernel = self.kernel_memory_limit, parse_assign(self.assign_gpus)
        if not limit and not per_kernel:
            return None, 0
        configured = "kernel_memory_limit" in self.config.get("GPUMonitor", {})
        source = (
            "c.GPUMonitor.kernel_memory_limit" if configured else f"{LIMIT_ENV} (the server's environment)"
        )
        reader = reader_factory()
        try:
            reader.open()
            devices = [
                info
                for info, _ in reader.devices(
                    on_lost=lambda index, error: self.log.warning(
                        "jupyter_gpu: GPU %d left out: %s", index, error
                    )
                )
            ]
        except (NvmlUnavailable, GpuLost) as error:
            self.log.warning("jupyter_gpu: no GPU can be read, so no quota or GPU assignment: %s", error)
            return None, 0
        finally:
            reader.close()
        totals = tuple(d.get("memory_total_bytes") or 0 for d in devices if d.get("mig") is None)
        if limit > max(totals):
            raise TraitError(
                f"{source} = {limit} bytes is more than the largest GPU's memory ({max(totals)} bytes)"
            )
        assignable = [
            d
            for d in devices
            if (d.get("mig") is None and not (d.get("mig_mode") or {}).get("current"))
            or (d.get("mig") is not None and per_kernel <= 1)  # see gpu_choice.combinable
        ]
        if per_kernel > len(assignable):
            mig = (
                " (a process sees one MIG device only, so MIG devices are not counted)"
                if per_kernel > 1
                else ""
            )
            raise TraitError(
                f"c.GPUMonitor.assign_gpus = {self.assign_gpus!r} asks for more GPUs per kernel than "
                f"this machine has ({len(assignable)}){mig}"
            )
        return (Quota(limit, source, totals, self.mps_memory_limit) if limit else None), per_kernel

    def initialize_settings(self) -> None:
        reader_factory = self._reader_factory()
        self.quota, per_kernel = self._kernel_environment(reader_factory)
        self.sampler = Sampler(
            reader_factory,
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
            memory_limit=self.quota.limit_bytes if self.quota else None,
        )
        manager = self.serverapp.kernel_manager
        self.assigner = (
            GpuAssigner(
                per_kernel,
                self._devices_now,
                self.kernels.holding,
                lambda: set(manager.list_kernel_ids()),
                self.log,
                self.quota.limit_bytes if self.quota else None,
            )
            if per_kernel
            else None
        )
        if self.assigner is not None:
            self.kernels.assignments = self.assigner.assigned
        if self.quota is not None or self.assigner is not None:
            kernel_env.install(self.serverapp.kernel_manager, self.quota, self.assigner)
        self.quota_watch = (
            QuotaWatch(
                self.serverapp.kernel_manager,
                self.serverapp.event_logger,
                self.quota.limit_bytes,
                self.over_limit_grace,
                self.over_limit_action,
                self.log,
                self.over_limit_headroom,
            )
            if self.quota
            else None
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
        self.full_history = FullHistory()
        self.notices = StopNotices(self.serverapp.event_logger, self.log)
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
        # at start, after every extension's initialize: JupyterHub's sets its own hook there
        install_page_config(self, serverapp.web_app.settings)
        # Keeps the kernel attribution that Prometheus reports fresh between API calls.
        self._refresh = PeriodicCallback(self._refresh_kernels, max(self.interval, 5.0) * 1000)
        self._refresh.start()
        if self.culler is not None:
            self._cull = PeriodicCallback(self._cull_kernels, self.cull_interval * 1000)
            self._cull.start()

    async def _refresh_kernels(self) -> None:
        try:
            view = await self.kernels.refresh()
            if self.quota_watch is not None:
                await self.quota_watch.check(view["kernels"])
            await self.exits.update(view["kernels"], self.sampler.status.devices)
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
