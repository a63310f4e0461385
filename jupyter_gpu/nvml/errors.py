"""What an NVML error means for the reader: NVML gone, one GPU gone, a version missing, or one
field unreadable; and which entry of the table in ``reasons`` explains it."""

from __future__ import annotations

import pynvml

from .reasons import Problem, problem_of_kind

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
# Errors that say this driver lacks one version of a versioned call (an older one may work).
MISSING_VERSION_CODES = frozenset(
    {
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
    }
)
_KINDS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "no_permission",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "version_mismatch",
}


def code_of(error: BaseException) -> int | None:
    return getattr(error, "value", None)


def problem(error: pynvml.NVMLError) -> Problem:
    """Why NVML could not be used, and what to do about it."""
    return problem_of_kind(_KINDS.get(code_of(error), "other"), str(error))


def field_reason(error: pynvml.NVMLError, *, mig_enabled: bool = False) -> str:
    """Why one reading is missing: unsupported by this GPU, or a failed call."""
    code = code_of(error)
    if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
        return "not supported while MIG mode is on" if mig_enabled else "not supported on this GPU"
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return "permission denied"
    return f"read failed: {error}"
