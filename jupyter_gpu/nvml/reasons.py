"""Turn NVML errors into sentences a person can act on."""
from __future__ import annotations

import pynvml

# Errors after which no call on any GPU can succeed until NVML is initialised again.
FATAL_CODES = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
)
# Errors that mean one GPU has dropped off the bus or needs a reset.
LOST_CODES = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})

_INIT_REASONS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "No NVIDIA driver found: NVIDIA's management library (libnvidia-ml.so.1) is not on this "
        "machine. Install the NVIDIA driver on the host; in a container, start it with the GPUs "
        "passed through (e.g. `docker run --gpus all` with the NVIDIA Container Toolkit)."
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
        "The NVIDIA driver is installed but not loaded. Load it (`sudo modprobe nvidia`) or "
        "reboot after a driver update; `nvidia-smi` should then list the GPUs."
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "Permission denied opening the NVIDIA devices (/dev/nvidia*). Add this user to the group "
        "that owns them (often `video`) or ask the administrator."
    ),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "The NVIDIA kernel module and the user-space driver have different versions (usually "
        "after a driver update without a reboot). Reboot, or reload the nvidia kernel modules."
    ),
}

NO_DEVICES = (
    "The NVIDIA driver is loaded but reports no GPUs. Check `nvidia-smi`; in a container, pass "
    "the GPUs through (`--gpus all`)."
)


def init_reason(error: pynvml.NVMLError) -> str:
    """Why NVML could not start, and what to do about it."""
    code = getattr(error, "value", None)
    if code in _INIT_REASONS:
        return _INIT_REASONS[code]
    return f"NVML could not start ({error}). Run `nvidia-smi` to see whether the driver works."


def field_reason(error: pynvml.NVMLError, *, mig_enabled: bool = False) -> str:
    """Why one reading is missing: unsupported by this GPU, or a failed call."""
    code = getattr(error, "value", None)
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return "not supported while MIG mode is on" if mig_enabled else "not supported on this GPU"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "permission denied"
    return f"read failed: {error}"


def code_of(error: BaseException) -> int | None:
    return getattr(error, "value", None)
