"""The panel and status bar when the server has no usable GPU: the server's reason, not an empty
panel. Runs at the root base_url (the other module covers a JupyterHub-style prefix)."""

from __future__ import annotations

import json

import pytest
from support.browser import open_gpu_panel, open_lab, screenshot
from support.machine import has_gpu

pytestmark = pytest.mark.browser


def _shows_the_servers_reason(page, lab, name: str) -> str:
    reason = lab.api("GET", "api/gpu/devices")
    assert reason["available"] is False and reason["reason"]
    open_lab(page, lab)
    open_gpu_panel(page)
    panel = page.locator("#jupyter-gpu-panel")
    panel.locator('[data-state="no-gpu"]').wait_for()
    shown = panel.locator('[data-field="reason"]')
    # the server's sentence, its `backticked` commands set as code rather than with backticks
    assert shown.inner_text() == reason["reason"].replace("`", "")
    commands = reason["reason"].split("`")[1::2]
    assert commands and shown.locator("code").all_inner_texts() == commands
    assert panel.locator(".jp-gpu-card").count() == 0
    assert "%gpu_doctor" in panel.inner_text()
    status = page.locator(".jp-gpu-status")
    page.wait_for_function("() => document.querySelector('.jp-gpu-status')?.textContent === 'no GPU'")
    assert status.get_attribute("title") == reason["reason"]
    screenshot(page, name)
    return reason["reason"]


def test_driver_not_loaded(page, lab_factory, tmp_path):
    readings = tmp_path / "no-driver.json"
    readings.write_text(json.dumps({"init_error": "NVML_ERROR_DRIVER_NOT_LOADED"}))
    lab = lab_factory(gpu={"simulated_readings": str(readings)})
    reason = _shows_the_servers_reason(page, lab, "no-gpu-driver-not-loaded")
    assert "not loaded" in reason
    # the simulated backend is labelled even when it simulates a machine without a GPU
    assert page.locator("#jupyter-gpu-panel .jp-gpu-simulated").is_visible()


def test_real_nvml_backend_on_this_machine(page, lab_factory):
    if has_gpu():
        pytest.skip("this machine has a GPU: the no-GPU state needs one without")
    lab = lab_factory(gpu={"backend": "nvml"})
    _shows_the_servers_reason(page, lab, "no-gpu-real-nvml")
    assert not page.locator("#jupyter-gpu-panel .jp-gpu-simulated").is_visible()
