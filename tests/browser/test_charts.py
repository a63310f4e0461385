"""The charts people read (issue #16), in a real JupyterLab under a non-root base_url, fed by the
simulated backend replaying the packaged H200 trace (jupyter_gpu/nvml/h200_trace.json):
axes with units, a hover value, data that moves, memory stacked by the notebook that allocated,
the GPU Dashboard from the palette, its window selector, the dark theme, and its memory charts
marking the cells of the notebooks that hold the memory."""

from __future__ import annotations

import json
import re
import time

import pytest
from support.browser import REPO, open_gpu_panel, open_lab, run_from_palette, screenshot

pytestmark = pytest.mark.browser

BASE_URL = "/hub/user/charts/"
TRACE = REPO / "jupyter_gpu" / "nvml" / "h200_trace.json"
GIB = 1024**3


@pytest.fixture(scope="module")
def lab(lab_factory):
    # one trace frame per second, sampled twice a second: every frame is seen
    return lab_factory(base_url=BASE_URL, gpu={"simulated_readings": str(TRACE)})


def chart(page, scope: str, kind: str):
    return page.locator(f"{scope} .jp-gpu-chart-{kind}").first


def hover(page, locator, at: float = 0.7) -> str:
    """Move the mouse over a chart's plot, ``at`` of its width from the left (1: the newest
    sample); returns its legend's text."""
    over = locator.locator(".u-over")
    box = over.bounding_box()
    assert box, "the chart has no plot area"
    page.mouse.move(box["x"] + (box["width"] - 2) * at, box["y"] + box["height"] / 2)
    return locator.locator(".u-legend").inner_text()


def test_panel_charts_have_axes_units_a_hover_value_and_move(page, lab):
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/api/gpu/" in r.url else None)
    open_lab(page, lab)
    open_gpu_panel(page)
    util = chart(page, "#jupyter-gpu-panel", "utilisation")
    util.locator("canvas").wait_for()
    # the value axis is labelled in its unit; the time axis in clock time
    page.wait_for_function(
        """() => Number(document.querySelector('#jupyter-gpu-panel .jp-gpu-chart-utilisation')
                 ?.dataset.samples) >= 4"""
    )
    legend = hover(page, util)
    assert re.search(r"\d\d:\d\d:\d\d", legend), f"no time in the hover legend: {legend!r}"
    assert re.search(r"GPU busy\s*\d+%", legend), f"no utilisation value on hover: {legend!r}"
    memory = chart(page, "#jupyter-gpu-panel", "memory")
    legend = hover(page, memory)
    assert re.search(r"driver / other\s*[\d.]+ (B|KiB|MiB|GiB)", legend), legend  # a value and its unit

    # the replayed trace moves: GPU 0's memory reading changes within a loop of the trace
    value = page.locator('.jp-gpu-card[data-gpu-index="0"] [data-field="memory_used_bytes"]')
    first = value.inner_text()
    page.wait_for_function(
        "([sel, first]) => document.querySelector(sel)?.textContent !== first",
        arg=['.jp-gpu-card[data-gpu-index="0"] [data-field="memory_used_bytes"]', first],
        timeout=90_000,
    )
    assert page.locator("#jupyter-gpu-panel .jp-gpu-simulated").is_visible()  # still marked
    assert requests and all(f"{BASE_URL}api/gpu/" in url for url in requests)
    screenshot(page, "panel-charts-simulated")


def test_memory_is_stacked_by_the_notebook_that_allocated(page, lab):
    kernel_id = lab.start_notebook_kernel("course/week3/finetune.ipynb")
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": kernel_id, "gpu_index": 0, "bytes": 24 * GIB})
    open_lab(page, lab)
    open_gpu_panel(page)
    memory = page.locator('.jp-gpu-card[data-gpu-index="0"] .jp-gpu-chart-memory')
    memory.locator("canvas").wait_for()
    # the server names the kernel's process once its attribution refresh (every 5 s) has run
    page.wait_for_function(
        """() => (document.querySelector('.jp-gpu-card[data-gpu-index="0"] .jp-gpu-chart-memory .u-legend')
                  ?.textContent || '').includes('course/week3/finetune.ipynb')""",
        timeout=30_000,
    )
    legend = hover(page, memory, at=1)
    assert re.search(r"course/week3/finetune\.ipynb\s*24\.0 GiB", legend), legend
    screenshot(page, "panel-memory-by-notebook")


def test_dashboard_opens_from_the_palette_with_every_gpu_and_a_window(page, lab):
    open_lab(page, lab)
    run_from_palette(page, "GPU Dashboard", shows="#jupyter-gpu-dashboard")
    dashboard = page.locator("#jupyter-gpu-dashboard")
    dashboard.wait_for()
    assert page.locator('.lm-TabBar-tab:has-text("GPU Dashboard")').count() == 1  # a main-area tab
    gpus = dashboard.locator(".jp-gpu-dashboard-gpu")
    gpus.first.wait_for()
    assert gpus.count() == len(json.loads(TRACE.read_text())["devices"])  # every GPU of the trace
    # the recording has GPM, so the really-busy and NVLink charts are there too
    for kind in ("utilisation", "activity", "memory", "power", "temperature", "clock", "pcie", "nvlink"):
        chart(page, "#jupyter-gpu-dashboard", kind).locator("canvas").wait_for()
    legend = hover(page, chart(page, "#jupyter-gpu-dashboard", "power"))
    assert re.search(r"power\s*\d+ W", legend) and re.search(r"limit\s*700 W", legend), legend

    choices = dashboard.locator(".jp-gpu-window-choice")
    assert choices.all_inner_texts() == ["60 s", "5 min", "10 min", "60 min"]
    dashboard.locator('[data-window="60"]').click()
    assert dashboard.locator('[data-window="60"]').get_attribute("aria-checked") == "true"
    screenshot(page, "dashboard-simulated-light")

    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
    )
    page.wait_for_selector('body[data-jp-theme-light="false"]', state="attached")
    page.locator("#jupyterlab-splash").wait_for(state="detached")  # the theme is applied
    chart(page, "#jupyter-gpu-dashboard", "utilisation").locator("canvas").wait_for()
    legend_colour = page.evaluate(
        "() => getComputedStyle(document.querySelector('#jupyter-gpu-dashboard .u-legend')).color"
    )
    r, g, b = (int(x) for x in re.findall(r"\d+", legend_colour)[:3])
    assert (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255 > 0.5, legend_colour
    screenshot(page, "dashboard-simulated-dark")
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})"
    )
    page.wait_for_selector('body[data-jp-theme-light="true"]', state="attached")


def test_dashboard_marks_the_cells_of_the_notebook_holding_the_memory(page, lab):
    path = "course/week4/cells.ipynb"
    kernel_id = lab.start_notebook_kernel(path)
    for code in ("%load_ext jupyter_gpu", "x = 1", "y = x + 1"):
        assert (
            lab.api("POST", "api/gpu-test/execute", {"kernel_id": kernel_id, "code": code})["status"] == "ok"
        )
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": kernel_id, "gpu_index": 0, "bytes": 8 * GIB})
    # the kernel publishes its cells at most once a second; the server reads them on request
    deadline = time.monotonic() + 30
    while len(cells := lab.api("GET", f"api/gpu/kernels/{kernel_id}/cells")["cells"]) < 2:
        assert time.monotonic() < deadline, f"the kernel recorded {cells}"
    counts = [c["execution_count"] for c in cells]

    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url.split("?")[0]) if "/api/gpu/" in r.url else None)
    open_lab(page, lab)
    page.evaluate("async () => { await window.jupyterapp.commands.execute('jupyter-gpu:dashboard'); }")
    memory = page.locator(
        '#jupyter-gpu-dashboard .jp-gpu-dashboard-gpu[data-gpu-index="0"] .jp-gpu-chart-memory'
    )
    memory.locator("canvas").wait_for()
    # once the server names the kernel's process (its attribution refresh, every 5 s), its cells
    page.wait_for_function(
        "([el, n]) => Number(el.dataset.markers) === n",
        arg=[memory.element_handle(), len(cells)],
        timeout=60_000,
    )
    assert path in memory.locator(".u-legend").inner_text()

    # across the plot, the pointer on each marker's line names its notebook and cell
    tip = memory.locator(".jp-gpu-marker-tip")
    box = memory.locator(".u-over").bounding_box()
    named: set[str] = set()
    for x in range(int(box["width"]) - 1, 0, -2):
        page.mouse.move(box["x"] + x, box["y"] + box["height"] / 2)
        if tip.is_visible():
            if not named:
                screenshot(page, "dashboard-cell-markers")
            named.update(tip.inner_text().splitlines())
    assert named == {f"{path} [{n}]" for n in counts}, named

    # a kernel's cells are asked for once every 5 polls of the telemetry at most
    polls = sum(url.endswith("/api/gpu/telemetry") for url in requests)
    ours = sum(url.endswith(f"/api/gpu/kernels/{kernel_id}/cells") for url in requests)
    assert 1 <= ours <= polls // 5 + 1, (ours, polls)
