"""What NVML says about the driver and GPUs, read without touching CUDA.

NVML is the one source that works before (and without) a CUDA context, so the doctor asks it
first. The error *kind* matters as much as the readings: "library not found" and "driver not
loaded" have different fixes, so it is kept rather than folded into a sentence.
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
    """``error_kind`` is None when NVML answered; then the other fields hold what it said."""

    error_kind: str | None = None
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: tuple[int, int] | None = None
    devices: list[NvmlDevice] = field(default_factory=list)


def _error_kinds(pynvml: Any) -> dict[int, str]:
    return {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
        pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "version_mismatch",
    }


def _optional(call: Any, *args: Any) -> Any:
    """One field: None when this GPU or driver does not support it."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _text(value: str | bytes | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _device(pynvml: Any, index: int) -> NvmlDevice:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    capability = _optional(pynvml.nvmlDeviceGetCudaComputeCapability, h)
    mig = _optional(pynvml.nvmlDeviceGetMigMode, h)
    return NvmlDevice(
        index=index,
        name=_text(_optional(pynvml.nvmlDeviceGetName, h)),
        uuid=_text(_optional(pynvml.nvmlDeviceGetUUID, h)),
        capability=tuple(capability) if capability else None,
        mig_current=bool(mig[0]) if mig else None,
        mig_pending=bool(mig[1]) if mig else None,
        ecc_uncorrected=_optional(
            pynvml.nvmlDeviceGetTotalEccErrors,
            h,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        ),
    )


def read_nvml() -> NvmlInfo:
    """Initialise NVML, read the driver and every GPU, shut NVML down again."""
    try:
        import pynvml
    except ImportError as error:
        return NvmlInfo(error_kind="missing_bindings", error=str(error))
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        kind = _error_kinds(pynvml).get(getattr(error, "value", None), "other")
        return NvmlInfo(error_kind=kind, error=str(error))
    try:
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        return NvmlInfo(
            driver_version=_text(_optional(pynvml.nvmlSystemGetDriverVersion)),
            cuda_driver_version=(cuda // 1000, cuda % 1000 // 10) if cuda else None,
            devices=[_device(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())],
        )
    except pynvml.NVMLError as error:
        return NvmlInfo(error_kind="other", error=str(error))
    finally:
        pynvml.nvmlShutdown()
