"""Who holds memory on one GPU, as NVML counts it: every process, named by what this machine
knows of it, with the calling process and its children (DataLoader workers, launchers) apart.

For ``%gpu_mem``, the out-of-memory explanation and the warm-up's memory figure, i.e. on demand,
never on a timer. ``nvml`` is the backend (pynvml, or ``SimulatedNVML`` in tests).
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import psutil
import pynvml

from .processes import ProcessMeta, describe
from .reader import GpuLost, NvmlReader, NvmlUnavailable


@dataclass(frozen=True)
class Holder:
    """One process holding memory on the GPU, named as helpfully as we can."""

    pid: int
    used_bytes: int | None
    label: str


@dataclass(frozen=True)
class DeviceView:
    """NVML's view of one GPU or MIG device (memory info v2: ``used`` excludes the driver's reserve)."""

    nvml_index: int
    uuid: str
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    # The calling process (a kernel, the CLI) and its children (DataLoader workers, launchers).
    this_kernel_bytes: int | None
    others: list[Holder] = field(default_factory=list)
    mig: bool = False  # a MIG device: its own memory, a slice of its GPU's

    @property
    def others_bytes(self) -> int:
        return sum(h.used_bytes or 0 for h in self.others)


def _own_pids() -> set[int]:
    me = psutil.Process()
    try:
        return {me.pid, *(child.pid for child in me.children(recursive=True))}
    except psutil.Error:
        return {me.pid}


NAMESPACE = (
    "NVML reports process IDs of another PID namespace (a container?), so this process's share cannot be told"
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
    uuid: str,
    nvml: ModuleType | Any = pynvml,
    *,
    labels: Callable[[], dict[int, str]] = dict,
    also_own: Iterable[int] = (),
) -> tuple[DeviceView | None, str | None]:
    """NVML's figures for the GPU or MIG device with this UUID; None and a reason when NVML
    cannot tell.

    ``labels`` names other processes (e.g. ``server_labels``); it is called only when there are
    other processes, so that a lone kernel never waits for the server. ``also_own``: NVML PIDs
    that are the caller's though not its own PID (matched across PID namespaces).
    """
    reader = NvmlReader(nvml)
    # Simulated readings name PIDs that hold no real GPU: skip the PID-namespace check there.
    verify = not reader.simulated
    try:
        reader.open()
        info = reader.find(uuid)  # a MIG device too: a kernel given one MIG slice sees that slice
        if info is None:
            return None, f"NVML lists no GPU with UUID {uuid}"
        index = info["index"]
        values, unsupported = reader.fast(index)
        processes = values.get("processes")
        if processes is None:
            return _view(index, uuid, info, values, None, []), unsupported.get("processes")
        own = _own_pids() | set(also_own)
        mine = [p for p in processes if p["pid"] in own]
        foreign = [p for p in processes if p["pid"] not in own]
        metas = {p["pid"]: describe(p["pid"], verify=verify) for p in foreign}
        names = labels() if foreign else {}
        others = sorted(
            (
                Holder(p["pid"], p["used_memory_bytes"], _label(p["pid"], names, metas[p["pid"]]))
                for p in foreign
            ),
            key=lambda h: -(h.used_bytes or 0),
        )
        if not mine and any(m.same_namespace is False for m in metas.values()):
            return _view(index, uuid, info, values, None, others), NAMESPACE
        withheld = any(p["used_memory_bytes"] is None for p in mine)
        this_kernel = None if withheld else sum(p["used_memory_bytes"] for p in mine)
        return _view(index, uuid, info, values, this_kernel, others), None
    except NvmlUnavailable as error:
        return None, error.reason
    except GpuLost as error:
        return None, f"the GPU stopped answering: {error}"
    finally:
        reader.close()


def _view(
    index: int,
    uuid: str,
    info: dict[str, Any],
    values: dict[str, Any],
    this_kernel: int | None,
    others: list[Holder],
) -> DeviceView:
    return DeviceView(
        nvml_index=index,
        uuid=uuid,
        name=info.get("name"),
        total_bytes=values.get("memory_total_bytes"),
        used_bytes=values.get("memory_used_bytes"),
        free_bytes=values.get("memory_free_bytes"),
        this_kernel_bytes=this_kernel,
        others=others,
        mig=info.get("mig") is not None,
    )


def all_devices(nvml: ModuleType | Any = pynvml) -> tuple[list[dict[str, Any]], str | None]:
    """Name and memory of every GPU and MIG device, for a kernel that has not used CUDA (no
    mapping to CUDA indices exists before CUDA init, so NVML's numbering is shown)."""
    reader = NvmlReader(nvml)
    try:
        rows = []
        reader.open()
        for info, _ in reader.devices():
            values, _ = reader.fast(info["index"])
            rows.append({**info, **values})
        return rows, None
    except NvmlUnavailable as error:
        return [], error.reason
    except GpuLost as error:
        return [], f"a GPU stopped answering: {error}"
    finally:
        reader.close()
