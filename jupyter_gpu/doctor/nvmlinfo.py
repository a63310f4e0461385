"""What NVML says about the driver and GPUs, read without touching CUDA.

NVML is the one source that works before (and without) a CUDA context, so the doctor asks it
first, through the package's one reader (``jupyter_gpu.nvml``). The error *kind* matters as much
as the readings: "library not found" and "driver not loaded" have different fixes, so it is kept
rather than folded into a sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class NvmlDevice:
    index: int
    name: str | None = None
    uuid: str | None = None
    capability: tuple[int, int] | None = None
    mig_current: bool | None = None
    mig_pending: bool | None = None
    ecc_uncorrected: int | None = None  # volatile count: since the driver last loaded


@dataclass
class NvmlInfo:
    """``error_kind`` is None when NVML answered (a ``reasons.Problem`` kind, or
    ``missing_bindings``); then the other fields hold what it said."""

    error_kind: str | None = None
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: tuple[int, int] | None = None
    devices: list[NvmlDevice] = field(default_factory=list)


def _device(reader: Any, index: int) -> NvmlDevice:
    info, _ = reader.device_info(index)
    checks, _ = reader.diagnostics(index)
    mig = info.get("mig_mode") or {}
    return NvmlDevice(
        index=index,
        name=info.get("name"),
        uuid=info.get("uuid"),
        capability=checks.get("cuda_capability"),
        mig_current=mig.get("current"),
        mig_pending=mig.get("pending"),
        ecc_uncorrected=checks.get("ecc_uncorrected_volatile"),
    )


def _version(text: str | None) -> tuple[int, int] | None:
    """The reader's "13.0" as (13, 0)."""
    if not text:
        return None
    major, _, minor = text.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def read_nvml(backend: Any = None) -> NvmlInfo:
    """Open NVML (``backend``: pynvml unless given), read the driver and every GPU, close it."""
    try:
        from ..nvml import GpuLost, NvmlReader, NvmlUnavailable
    except ImportError as error:  # nvidia-ml-py is missing from this environment
        return NvmlInfo(error_kind="missing_bindings", error=str(error))
    reader = NvmlReader() if backend is None else NvmlReader(backend)
    try:
        count = reader.open()
        system = reader.system()
        devices = [_device(reader, i) for i in range(count)]
    except NvmlUnavailable as error:
        return NvmlInfo(error_kind=error.problem.kind, error=error.detail)
    except GpuLost as error:
        return NvmlInfo(error_kind="other", error=str(error))
    finally:
        reader.close()
    return NvmlInfo(
        driver_version=system.get("driver_version"),
        cuda_driver_version=_version(system.get("cuda_driver_version")),
        devices=devices,
    )
