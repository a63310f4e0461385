"""Who holds memory on one GPU, seen from inside a kernel: NVML for every process, the
allocator for this one, and the Jupyter server for which notebook a process belongs to.

Used by ``%gpu_mem`` and the out-of-memory explanation, i.e. on demand, never on a timer.
"""
from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import psutil
import pynvml

from ..analysis.fragmentation import AllocatorFigures, allocator_figures, summarize_snapshot
from ..client import ServerError, discover
from ..nvml import GpuLost, NvmlReader, NvmlUnavailable
from ..nvml.processes import ProcessMeta, describe
from .torch_state import snapshot_segments

# Tests swap in jupyter_gpu.nvml.simulated; everywhere else this is the real pynvml module.
nvml_backend: Callable[[], Any] = lambda: pynvml  # noqa: E731
SERVER_TIMEOUT = 2.0


@dataclass(frozen=True)
class Holder:
    """One process holding memory on the GPU, named as helpfully as we can."""

    pid: int
    used_bytes: int | None
    label: str


@dataclass(frozen=True)
class DeviceView:
    """NVML's view of one GPU (memory info v2: ``used`` excludes the driver's reserve)."""

    nvml_index: int
    uuid: str
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    # This kernel's process and its children (DataLoader workers, launchers).
    this_kernel_bytes: int | None
    others: list[Holder] = field(default_factory=list)

    @property
    def others_bytes(self) -> int:
        return sum(h.used_bytes or 0 for h in self.others)


def allocator_view(torch: ModuleType, device: int, *, with_snapshot: bool = True) -> tuple[AllocatorFigures, list[dict[str, Any]] | None]:
    """This kernel's allocator figures for one device, and its snapshot segments if asked."""
    segments = None
    if with_snapshot:
        segments = [s for s in snapshot_segments(torch) if s.get("device", 0) == device]
    summary = summarize_snapshot(segments, device) if segments is not None else None
    return allocator_figures(torch.cuda.memory_stats(device), summary), segments


def _own_pids() -> set[int]:
    me = psutil.Process()
    try:
        return {me.pid, *(child.pid for child in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


NAMESPACE = (
    "NVML reports process IDs of another PID namespace (a container?), so this kernel's share "
    "cannot be told"
)


def _label(pid: int, server_labels: dict[int, str], meta: ProcessMeta) -> str:
    if pid in server_labels:
        return server_labels[pid]
    if meta.same_namespace is False:
        return f"pid {pid} (not visible from here: another container or PID namespace)"
    if meta.command is None:
        return f"pid {pid} (another user's process)" if meta.user is None else f"pid {pid}"
    user = f" [{meta.user}]" if meta.user and meta.user != getpass.getuser() else ""
    return f"pid {pid}{user}: {meta.command[:120]}"


def device_view(
    uuid: str, *, labels: Callable[[], dict[int, str]] = dict
) -> tuple[DeviceView | None, str | None]:
    """NVML's figures for the GPU with this UUID; None and a reason when NVML cannot tell.

    ``labels`` names other processes (e.g. ``server_labels``); it is called only when there are
    other processes, so that a lone kernel never waits for the server.
    """
    reader = NvmlReader(nvml_backend())
    # Simulated readings name PIDs that hold no real GPU: skip the PID-namespace check there.
    verify = not reader.simulated
    try:
        count = reader.open()
        for index in range(count):
            info, _ = reader.device_info(index)
            if info.get("uuid") != uuid:
                continue
            values, unsupported = reader.fast(index)
            processes = values.get("processes")
            if processes is None:
                return _view(index, uuid, info, values, None, []), unsupported.get("processes")
            own = _own_pids()
            mine = [p for p in processes if p["pid"] in own]
            foreign = [p for p in processes if p["pid"] not in own]
            metas = {p["pid"]: describe(p["pid"], verify=verify) for p in foreign}
            names = labels() if foreign else {}
            others = sorted(
                (Holder(p["pid"], p["used_memory_bytes"], _label(p["pid"], names, metas[p["pid"]])) for p in foreign),
                key=lambda h: -(h.used_bytes or 0),
            )
            if not mine and any(m.same_namespace is False for m in metas.values()):
                return _view(index, uuid, info, values, None, others), NAMESPACE
            withheld = any(p["used_memory_bytes"] is None for p in mine)
            this_kernel = None if withheld else sum(p["used_memory_bytes"] for p in mine)
            return _view(index, uuid, info, values, this_kernel, others), None
        return None, f"NVML lists no GPU with UUID {uuid}"
    except NvmlUnavailable as error:
        return None, error.reason
    except GpuLost as error:
        return None, f"the GPU stopped answering: {error}"
    finally:
        reader.close()


def _view(index: int, uuid: str, info: dict[str, Any], values: dict[str, Any], this_kernel: int | None, others: list[Holder]) -> DeviceView:
    return DeviceView(
        nvml_index=index,
        uuid=uuid,
        name=info.get("name"),
        total_bytes=values.get("memory_total_bytes"),
        used_bytes=values.get("memory_used_bytes"),
        free_bytes=values.get("memory_free_bytes"),
        this_kernel_bytes=this_kernel,
        others=others,
    )


def all_devices() -> tuple[list[dict[str, Any]], str | None]:
    """Name and memory of every GPU, for a kernel that has not used CUDA (no mapping to CUDA
    indices exists before CUDA init, so NVML's numbering is shown)."""
    reader = NvmlReader(nvml_backend())
    try:
        rows = []
        for index in range(reader.open()):
            info, _ = reader.device_info(index)
            values, _ = reader.fast(index)
            rows.append({**info, **values})
        return rows, None
    except NvmlUnavailable as error:
        return [], error.reason
    except GpuLost as error:
        return [], f"a GPU stopped answering: {error}"
    finally:
        reader.close()


def server_labels(uuid: str) -> dict[int, str]:
    """PID → "notebook <path>" for kernels of this kernel's Jupyter server on that GPU.

    Asks ``GET {server}api/gpu/kernels`` of the first server ``client.discover`` lists (the one
    that started this kernel, when there is one), which maps NVML processes (children included)
    to kernels and sessions; empty when there is no such server or it cannot be asked.
    """
    servers = discover()
    if not servers:
        return {}
    try:
        data = servers[0].get("api/gpu/kernels", timeout=SERVER_TIMEOUT)
    except ServerError:
        return {}
    labels: dict[int, str] = {}
    for kernel in _list(data.get("kernels")):
        if not isinstance(kernel, dict):
            continue
        name = f"notebook {kernel['path']}" if kernel.get("path") else f"kernel {kernel.get('id')}"
        for row in _list(kernel.get("gpu_memory")):
            if isinstance(row, dict) and row.get("uuid") == uuid:
                labels.update({pid: name for pid in _list(row.get("pids")) if isinstance(pid, int)})
    return labels


def _list(value: Any) -> list[Any]:
    """The server's reply is checked like any input: a list where one is expected, else nothing."""
    return value if isinstance(value, list) else []

