"""Thin, fault-tolerant adapter around NVML (the ``pynvml`` module from nvidia-ml-py).

Used by the server's sampler and by kernel-side diagnostics. Never imports torch.
"""
from .reader import GpuLost, NvmlReader, NvmlUnavailable

__all__ = ["GpuLost", "NvmlReader", "NvmlUnavailable"]
