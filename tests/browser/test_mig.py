"""A GPU in MIG mode: the badge, and whole-GPU utilisation shown as not supported with NVML's
reason (the simulated H200 readings with MIG switched on for GPU 1); and a GPU split into MIG
devices (tests/fixtures/nvml_readings_mig.json), each a card of its own under its GPU's."""

from __future__ import annotations

import json

import pytest
from support.browser import open_gpu_panel, open_lab, screenshot
from support.paths import MIG_READINGS, READINGS

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


def test_each_mig_device_has_a_card_of_its_own_under_its_gpu(page, lab_factory):
    lab = lab_factory(gpu={"simulated_readings": str(MIG_READINGS)})
    kernel_id = lab.start_notebook_kernel("course/mig.ipynb")
    lab.api(
        "POST",
        "api/gpu-test/attach",
        {"kernel_id": kernel_id, "gpu_index": 0, "mig_index": 2, "bytes": 5 * 2**30},
    )
    open_lab(page, lab)
    open_gpu_panel(page)
    small = page.locator('.jp-gpu-card[data-gpu-index="4"]')
    small.wait_for()
    labels = page.locator('.jp-gpu-card [data-field="label"]').all_inner_texts()
    assert labels == ["GPU 0", "GPU 0 · MIG 3g.71gb", "GPU 0 · MIG 2g.35gb", "GPU 0 · MIG 1g.18gb", "GPU 1"]
    assert small.locator('[data-field="mig-instance"]').inner_text() == "GI 9 · CI 0"
    assert small.locator('[data-field="memory_used_bytes"]').inner_text() == "0 / 16.8 GiB"
    # what belongs to the whole GPU is on GPU 0's card alone
    assert small.locator('[data-field="temperature_celsius"]').count() == 0
    assert small.locator('[data-field="gpu-wide"]').get_attribute("title") == "GPU-wide: see GPU 0"
    gpu0 = page.locator('.jp-gpu-card[data-gpu-index="0"]')
    assert gpu0.locator('[data-field="mig"]').inner_text() == "MIG"
    assert gpu0.locator('[data-field="temperature_celsius"]').inner_text() == "38 °C"
    assert (
        gpu0.locator(".jp-gpu-chart-memory").get_attribute("aria-label").startswith("GPU 0 memory by holder")
    )
    # the notebook's kernel holds memory on the 1g.18gb device, named as the card is
    chip = page.locator(f'.jp-gpu-kernel[data-kernel-id="{kernel_id}"] [data-field="kernel-gpu-memory"]')
    chip.wait_for()
    assert chip.inner_text() == "GPU 0 · MIG 1g.18gb: 5.00 GiB"
    # the fullest device is a MIG device, not the GPU that holds it
    assert page.locator(".jp-gpu-status").inner_text() == "GPU 0 · MIG 3g.71gb: — · 12.5 / 66.3 GiB · sim"
    screenshot(page, "panel-mig-devices")
