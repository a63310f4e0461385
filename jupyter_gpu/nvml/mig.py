"""MIG devices as devices of their own, in nvitop's model: the GPU, then each of its MIG devices.

A GPU in MIG mode is split into instances, each with its own UUID (``MIG-…``), memory and
processes, reached through handles of their own (``nvmlDeviceGetMigDeviceHandleByIndex``). What
belongs to the whole GPU (temperature, power and its limit, energy, clocks, fan, PCIe, clocks event
reasons, utilisation, GPM's activity figures, ECC and the other field values) is read on the GPU only: on a MIG device it
is null with a reason that points to the GPU, never copied, so that nothing is counted twice. The
processes are read on the MIG devices, which NVML answers without privileges, and are then left
out of their GPU's sample, so that no process counts on two devices.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pynvml

from .errors import code_of
from .fields import GPM_FIELDS, SLOW_FIELDS

# nvidia-smi's profile names, as NVML ends a MIG device's name with them: "NVIDIA H200 MIG
# 1g.18gb"; a compute instance with part of its GPU instance's slices is "1c.3g.71gb".
_PROFILE = re.compile(r"\bMIG ((?:\d+c\.)?\d+g\.\d+gb)\b")
_PREFIX = re.compile(r"^(GPU|MIG)-", re.IGNORECASE)
# Readings of the whole GPU: null on its MIG devices, with ``gpu_wide``'s reason.
GPU_WIDE = (
    "temperature_celsius",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
    "clock_throttle_reasons",
    "clock_sm_mhz",
    "clock_mem_mhz",
    "fan_speed_percent",
    *SLOW_FIELDS,
    *GPM_FIELDS,
)
# NVML reports no utilisation in MIG mode, neither per MIG device nor for the GPU.
UTILISATION = ("utilization_gpu_percent", "utilization_memory_percent")
NO_UTILISATION = "not supported on a MIG device"
PROCESSES_ON_MIG = "listed on its MIG devices"


@dataclass(frozen=True)
class Slot:
    """Where a MIG device is: its GPU's NVML index, and its index among that GPU's MIG devices."""

    parent: int
    slot: int


def gpu_wide(parent: int) -> str:
    """Why a MIG device has no reading of the whole GPU: where to find it."""
    return f"GPU-wide: see GPU {parent}"


def not_on_mig(parent: int) -> dict[str, str]:
    """Each reading a MIG device does not have, with why."""
    return {
        **{name: gpu_wide(parent) for name in GPU_WIDE},
        **{name: NO_UTILISATION for name in UTILISATION},
    }


def profile(name: str | None) -> str | None:
    """The MIG profile (``1g.18gb``) in a MIG device's name, None where the name has none."""
    found = _PROFILE.search(name or "")
    return found.group(1) if found else None


def bare_uuid(uuid: str) -> str:
    """A UUID without its prefix, lower case: PyTorch writes a MIG device's UUID as jupyter_gpu
    writes a GPU's (``GPU-`` and CUDA's UUID), NVML as ``MIG-`` and the same UUID."""
    return _PREFIX.sub("", uuid).lower()


def handles(nvml: Any, parent: Any) -> Iterator[tuple[int, Any]]:
    """(index, handle) of each MIG device of a GPU in MIG mode; a slot NVML answers with
    NVML_ERROR_NOT_FOUND holds none (instances destroyed leave gaps)."""
    for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            yield index, nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, index)
        except pynvml.NVMLError as error:
            if code_of(error) != pynvml.NVML_ERROR_NOT_FOUND:
                raise
