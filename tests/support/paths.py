"""Where things are: this checkout, its tests folder, and the recorded fixtures the tests replay."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: what kernels and servers import jupyter_gpu from
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"
READINGS = FIXTURES / "nvml_readings_2gpu.json"  # NVML as the two-H200 machine answered
MIG_READINGS = FIXTURES / "nvml_readings_mig.json"  # the same, GPU 0 split into three MIG devices
