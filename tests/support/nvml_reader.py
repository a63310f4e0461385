"""A reader over NVML as the H200 machine answered it (the simulated backend replaying
tests/fixtures/nvml_readings_2gpu.json), opened and with its devices listed, as the sampler has it."""

from __future__ import annotations

from jupyter_gpu.nvml import NvmlReader
from jupyter_gpu.nvml.simulated import SimulatedNVML
from support.paths import READINGS


def replayed() -> SimulatedNVML:
    return SimulatedNVML.from_file(READINGS)


def opened(nvml: SimulatedNVML) -> NvmlReader:
    reader = NvmlReader(nvml)
    reader.open()
    list(reader.devices())
    return reader
