"""Thin, fault-tolerant adapter around NVML (the ``pynvml`` module from nvidia-ml-py), the
process facts behind NVML's PIDs, and what CUDA_VISIBLE_DEVICES leaves visible.

Used by the server's sampler, the command line, the doctor and kernel-side diagnostics. Never
imports torch. The reader is imported on first use, so that ``jupyter_gpu.nvml.reasons`` loads
without pynvml (the doctor reports a missing pynvml rather than failing to import).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GpuLost", "NvmlReader", "NvmlUnavailable"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import reader

        return getattr(reader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
