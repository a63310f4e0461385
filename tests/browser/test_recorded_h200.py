"""The panel and the dashboard drawing what a real H200 server answered over 107 s of two
notebooks: course/week3/finetune.ipynb loading a model, training, a bigger batch, freeing it;
course/week1/intro.ipynb holding 6 GiB, idle.

tests/fixtures/h200_training/ holds the `api/gpu/*` replies recorded by the gpu-marked test
tests/test_record_training_gpu.py on the H200 machine (which has no browser). Here the browser's
requests for those routes are answered with the recordings, so the charts are drawn from real
GPU figures rather than the simulated backend's. The pictures of the README and the docs are these screenshots.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.browser import answer_with, open_gpu_panel, open_lab, recorded_in, screenshot

pytestmark = pytest.mark.browser

RECORDED = Path(__file__).parent.parent / "fixtures" / "h200_training"


def recorded(name: str) -> dict:
    return recorded_in(RECORDED, name)


def serve_recordings(page) -> None:
    """Answer the panel's and dashboard's requests with the recorded replies (the cells route is
    registered last: Playwright tries the newest route first, and kernels* matches it too)."""
    for name in ("devices", "telemetry", "kernels"):
        page.route(f"**/api/gpu/{name}*", answer_with(json.dumps(recorded(name))))
    cells = recorded("cells")

    def cells_of(route, request) -> None:  # only the trainer's cells were recorded
        if f"/kernels/{cells['kernel_id']}/cells" in request.url:
            route.fulfill(status=200, content_type="application/json", body=json.dumps(cells))
        else:
            route.fulfill(status=404, content_type="application/json", body='{"message": "no such kernel"}')

    page.route("**/api/gpu/kernels/*/cells*", cells_of)


def notebooks() -> dict[str, dict]:
    return {Path(k["path"]).name: k for k in recorded("kernels")["kernels"]}


def test_panel_draws_two_notebooks_on_a_real_h200(page, lab_factory):
    lab = lab_factory()
    serve_recordings(page)
    open_lab(page, lab)
    open_gpu_panel(page)
    panel = page.locator("#jupyter-gpu-panel")
    panel.locator(".jp-gpu-card").first.wait_for()

    gpu0 = recorded("telemetry")["latest"]["gpus"][0]
    card = page.locator('.jp-gpu-card[data-gpu-index="0"]')
    assert panel.locator(".jp-gpu-card").count() == len(recorded("devices")["devices"])
    assert panel.locator(".jp-gpu-simulated").count() == 0  # real readings carry no badge
    assert card.locator(".jp-gpu-name").inner_text() == "NVIDIA H200"
    assert (
        card.locator('[data-field="utilization_gpu_percent"]').inner_text()
        == f"{gpu0['utilization_gpu_percent']}%"
    )
    assert card.locator('[data-field="power_watts"]').inner_text() == f"{gpu0['power_watts']:.0f} / 700 W"
    for name, kernel in notebooks().items():
        row = page.locator(f'.jp-gpu-kernel[data-kernel-id="{kernel["id"]}"]')
        row.wait_for()
        assert row.locator(".jp-gpu-link").inner_text() == name
    samples = len(recorded("telemetry")["history"])
    page.wait_for_function(
        f"""() => [...document.querySelectorAll('#jupyter-gpu-panel .jp-gpu-timechart')]
                 .some(c => c.querySelector('canvas') && Number(c.dataset.samples) >= {samples})"""
    )
    screenshot(page, "panel-h200-training")


def test_dashboard_draws_the_training_run_stacked_by_notebook(page, lab_factory):
    """107 s of the recording in the dashboard: every sample drawn, the memory stacked by the two
    notebooks as NVML counted them at the end, and the training notebook's cells marked."""
    lab = lab_factory()
    serve_recordings(page)
    open_lab(page, lab)
    page.evaluate("async () => { await window.jupyterapp.commands.execute('jupyter-gpu:dashboard'); }")
    dashboard = page.locator("#jupyter-gpu-dashboard")
    gpu0 = dashboard.locator('.jp-gpu-dashboard-gpu[data-gpu-index="0"]')
    for kind in ("utilisation", "memory", "power", "temperature", "clock", "pcie"):
        gpu0.locator(f".jp-gpu-chart-{kind} canvas").wait_for()
    dashboard.locator('[data-window="300"]').click()  # 5 minutes: the whole run, wide
    samples = len(recorded("telemetry")["history"])
    assert gpu0.locator(".jp-gpu-chart-utilisation").get_attribute("data-samples") == str(samples)
    memory = gpu0.locator(".jp-gpu-chart-memory")
    over = memory.locator(".u-over")
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)  # the newest sample
    legend = memory.locator(".u-legend").inner_text()
    for kernel in notebooks().values():
        held = format_gib(sum(row["used_memory_bytes"] for row in kernel["gpu_memory"]))
        assert re.search(rf"{re.escape(kernel['path'])}\s*{re.escape(held)}", legend), (held, legend)
    marks = recorded("cells")["cells"]  # one dashed line per recorded cell of the trainer
    page.wait_for_function(
        "([el, n]) => Number(el.dataset.markers) === n", arg=[memory.element_handle(), len(marks)]
    )
    page.mouse.move(box["x"] + box["width"] * 0.75, box["y"] + box["height"] / 2)
    screenshot(page, "dashboard-h200-training")


def format_gib(n: int) -> str:
    """The panel's style for these sizes (labextension/src/format.ts): three figures."""
    mib = n / 1024**2
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{mib:.0f} MiB" if mib >= 100 else f"{mib:.1f} MiB"
