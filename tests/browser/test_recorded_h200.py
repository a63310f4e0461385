"""The panel rendering what a real 2×H200 server answered while a notebook trained.

tests/fixtures/h200_api/ holds the `api/gpu/*` responses recorded by the gpu-marked test
`test_the_panel_sees_a_training_notebook` on the H200 machine (which has no browser). Here the
browser's requests for those routes are answered with the recordings, so the sidebar is drawn
from real GPU figures rather than the simulated backend's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from browser_support import (  # noqa: F401  (fixtures are used by name)
    chromium,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_factory,
    open_gpu_panel,
    open_lab,
    page,
    screenshot,
    screenshots_folder,
)

pytestmark = pytest.mark.browser

RECORDED = Path(__file__).parent.parent / "fixtures" / "h200_api"


def recorded(name: str) -> dict:
    return json.loads((RECORDED / f"{name}.json").read_text())


def answer_with(body: str):
    def handler(route, request) -> None:
        route.fulfill(status=200, content_type="application/json", body=body)

    return handler


def test_panel_draws_a_training_notebook_on_real_h200s(page, lab_factory):
    lab = lab_factory()
    bodies = {name: json.dumps(recorded(name)) for name in ("devices", "telemetry", "kernels")}
    for name, body in bodies.items():
        page.route(f"**/api/gpu/{name}*", answer_with(body))
    open_lab(page, lab)
    open_gpu_panel(page)
    panel = page.locator("#jupyter-gpu-panel")
    panel.locator(".jp-gpu-card").first.wait_for()

    telemetry, kernels = recorded("telemetry"), recorded("kernels")
    gpu0 = telemetry["latest"]["gpus"][0]
    card = page.locator('.jp-gpu-card[data-gpu-index="0"]')
    assert panel.locator(".jp-gpu-card").count() == len(recorded("devices")["devices"])
    assert panel.locator(".jp-gpu-simulated").count() == 0  # real readings carry no badge
    assert card.locator(".jp-gpu-name").inner_text() == "NVIDIA H200"
    assert (
        card.locator('[data-field="utilization_gpu_percent"]').inner_text()
        == f"{gpu0['utilization_gpu_percent']}%"
    )
    assert card.locator('[data-field="power_watts"]').inner_text() == f"{gpu0['power_watts']:.0f} / 700 W"

    trainer = kernels["kernels"][0]
    row = page.locator(f'.jp-gpu-kernel[data-kernel-id="{trainer["id"]}"]')
    row.wait_for()
    assert row.locator(".jp-gpu-link").inner_text() == Path(trainer["path"]).name
    allocator = row.locator('[data-field="allocator"]').inner_text()
    assert "allocated" in allocator and "cached" in allocator and "fragmented" in allocator
    page.wait_for_function(
        """() => [...document.querySelectorAll('#jupyter-gpu-panel .jp-gpu-timechart')]
                 .some(c => c.querySelector('canvas') && Number(c.dataset.samples) >= 2)"""
    )
    screenshot(page, "panel-h200-training")


def test_dashboard_draws_the_recorded_training_run(page, lab_factory):
    """The dashboard over the recorded 2xH200 reply: the training step at the end shows as
    GPU 0's utilisation reaching 100% and its power rising."""
    lab = lab_factory()
    for name in ("devices", "telemetry", "kernels"):
        page.route(f"**/api/gpu/{name}*", answer_with(json.dumps(recorded(name))))
    open_lab(page, lab)
    page.evaluate("async () => { await window.jupyterapp.commands.execute('jupyter-gpu:dashboard'); }")
    gpu0 = page.locator('#jupyter-gpu-dashboard .jp-gpu-dashboard-gpu[data-gpu-index="0"]')
    for kind in ("utilisation", "memory", "power", "temperature", "clock", "pcie"):
        gpu0.locator(f".jp-gpu-chart-{kind} canvas").wait_for()
    samples = len(recorded("telemetry")["history"])
    assert gpu0.locator(".jp-gpu-chart-utilisation").get_attribute("data-samples") == str(samples)
    over = gpu0.locator(".jp-gpu-chart-utilisation .u-over")
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
    legend = gpu0.locator(".jp-gpu-chart-utilisation .u-legend").inner_text()
    assert re.search(r"GPU busy\s*100%", legend), legend
    screenshot(page, "dashboard-h200-training")
