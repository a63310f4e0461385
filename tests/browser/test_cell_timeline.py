"""A notebook's per-cell timeline in the panel, drawn from the replies a real H200 gave
(`tests/fixtures/h200_api/cells.json` and `kernels_with_cells.json`, recorded by
tests/test_cell_timeline_gpu.py): the chart, the cells that left the most and peaked highest, and
a click that scrolls the open notebook to the cell."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from support.browser import answer_with, open_gpu_panel, open_lab, recorded_in, screenshot

pytestmark = pytest.mark.browser
H200_API = Path(__file__).parent.parent / "fixtures" / "h200_api"  # the cells gpu test's replies
FILLER = 60  # markdown cells before the recorded ones: the cell to show starts off screen


def write_notebook(lab, cells_reply: dict) -> None:
    """The notebook the recorded kernel ran, with the same cell ids, far down the page."""
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    nb.cells = [nbformat.v4.new_markdown_cell(f"Notes, part {i}.") for i in range(FILLER)]
    for cell in cells_reply["cells"]:
        code = nbformat.v4.new_code_cell(f"# the cell that ran as {cell['cell_id']}", id=cell["cell_id"])
        code.execution_count = cell["execution_count"]
        nb.cells.append(code)
    path = lab.root / cells_reply["path"]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def test_the_timeline_names_the_cells_and_shows_one_in_the_notebook(page, lab_factory):
    lab = lab_factory()
    cells_reply = recorded_in(H200_API, "cells")
    write_notebook(lab, cells_reply)
    for name, body in (
        ("devices", recorded_in(H200_API, "devices")),
        ("telemetry", recorded_in(H200_API, "telemetry")),
        ("kernels", recorded_in(H200_API, "kernels_with_cells")),
    ):
        page.route(f"**/api/gpu/{name}?*", answer_with(json.dumps(body)))
        page.route(f"**/api/gpu/{name}", answer_with(json.dumps(body)))
    page.route("**/api/gpu/kernels/*/cells*", answer_with(json.dumps(cells_reply)))
    open_lab(page, lab, f"lab/tree/{cells_reply['path']}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    open_gpu_panel(page)

    row = page.locator(f'.jp-gpu-kernel[data-kernel-id="{cells_reply["kernel_id"]}"]')
    row.locator(".jp-gpu-timeline-toggle").click()
    timeline = row.locator('[data-field="timeline"]')
    timeline.wait_for()
    assert "7 cells run, 5 with CUDA in use" in timeline.locator(".jp-gpu-hint").first.inner_text()
    timeline.locator(".jp-gpu-timeline-chart canvas").wait_for()
    page.wait_for_function(  # each CUDA cell's start is marked
        "el => el.dataset.markers === '5'", arg=timeline.locator(".jp-gpu-timeline-chart").element_handle()
    )
    by_id = {c["cell_id"]: c for c in cells_reply["cells"]}
    most_left = timeline.locator('[data-field="most-left"] li')
    assert most_left.first.inner_text().startswith(f"cell [{by_id['keep-4']['execution_count']}] +4.00 GiB")
    assert most_left.count() == 3
    peaks = timeline.locator('[data-field="highest-peaks"] li')
    assert peaks.first.inner_text().startswith(f"cell [{by_id['free-8']['execution_count']}] 15.0 GiB")
    screenshot(page, "panel-cell-timeline-h200")

    target = page.locator(".jp-Notebook .jp-Cell").nth(FILLER + list(by_id).index("keep-4"))
    most_left.first.locator("button").click()
    active = page.locator(".jp-Notebook .jp-Cell.jp-mod-active")
    active.locator("text=the cell that ran as keep-4").wait_for()
    page.wait_for_function(
        """() => {
            const cell = document.querySelector('.jp-Notebook .jp-Cell.jp-mod-active');
            const box = cell.closest('.jp-WindowedPanel-outer') || cell.parentElement;
            const c = cell.getBoundingClientRect(), b = box.getBoundingClientRect();
            return c.top >= b.top && c.bottom <= b.bottom;
        }"""
    )
    assert target.evaluate("node => node.classList.contains('jp-mod-active')")
