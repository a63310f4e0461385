"""A GPU in MIG mode: the badge, and whole-GPU utilisation shown as not supported with NVML's
reason (the simulated H200 readings with MIG switched on for GPU 1)."""

from __future__ import annotations

import json

import pytest
from support.browser import open_gpu_panel, open_lab, screenshot
from support.paths import READINGS

pytestmark = pytest.mark.browser


def test_mig_mode_and_unsupported_utilisation(page, lab_factory, tmp_path):
    readings = json.loads(READINGS.read_text())
    readings["devices"][1]["mig_mode"] = [1, 1]
    path = tmp_path / "mig.json"
    path.write_text(json.dumps(readings))
    lab = lab_factory(gpu={"simulated_readings": str(path)})
    lab.api(
        "POST",
        "api/gpu-test/fail",
        {"function": "nvmlDeviceGetUtilizationRates", "error": "NVML_ERROR_NOT_SUPPORTED", "gpu_index": 1},
    )
    open_lab(page, lab)
    open_gpu_panel(page)
    gpu1 = page.locator('.jp-gpu-card[data-gpu-index="1"]')
    gpu1.wait_for()
    assert gpu1.locator('[data-field="mig"]').inner_text() == "MIG"
    util = gpu1.locator('[data-field="utilization_gpu_percent"]')
    page.wait_for_function(
        """() => document.querySelector('.jp-gpu-card[data-gpu-index="1"] [data-field="utilization_gpu_percent"]')
                 ?.textContent === 'not supported'"""
    )
    assert util.get_attribute("title") == "not supported while MIG mode is on"
    gpu0 = page.locator('.jp-gpu-card[data-gpu-index="0"]')
    assert gpu0.locator('[data-field="mig"]').count() == 0
    assert gpu0.locator('[data-field="utilization_gpu_percent"]').inner_text() == "0%"
    # without utilisation, GPU 1 ranks by its memory in use (a little) against GPU 0's 0 %
    assert page.locator(".jp-gpu-status").inner_text() == "GPU 1: — · 3.25 MiB / 140 GiB · sim"
    screenshot(page, "panel-mig")
