"""%gpu_monitor in real JupyterLab: the widget renders and moves, and clearing the output (which
only the front end knows about) stops the kernel's monitor thread. NVML is simulated in the kernel."""

from __future__ import annotations

import json
import time

import pytest
from support.browser import SCREENSHOTS, open_lab, screenshot
from support.machine import has_gpu
from support.paths import READINGS

pytestmark = pytest.mark.browser

CELLS = [
    "%load_ext jupyter_gpu\n"
    "from jupyter_gpu.kernel import gpu_memory\n"
    "from jupyter_gpu.nvml.simulated import SimulatedNVML\n"
    f"sim = SimulatedNVML.from_file({str(READINGS)!r})\n"
    "sim.readings['devices'][0]['utilization']['gpu'] = 37\n"
    "gpu_memory.nvml_backend = lambda: sim  # no GPU here: replay readings of 2 x H200",
    "%gpu_monitor --interval 0.5",
    "import threading\nprint('monitor threads:', sum(t.name == 'jupyter_gpu-monitor' for t in threading.enumerate()))",
]


def _run_cell(page, index: int) -> None:
    page.evaluate(
        """async (index) => {
            const panel = window.jupyterapp.shell.currentWidget;
            panel.content.activeCellIndex = index;
            await window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        index,
    )


def _threads(page) -> str:
    _run_cell(page, 2)
    cell = page.locator(".jp-Notebook .jp-Cell").nth(2)
    cell.locator(".jp-OutputArea-output").filter(has_text="monitor threads").wait_for()
    return cell.locator(".jp-OutputArea-output").inner_text().strip()


def _open_notebook(page, lab, name: str, cells: list[str]) -> None:
    """Write a notebook of these code cells, open it, and wait for its kernel."""
    notebook = {
        "cells": [
            {"cell_type": "code", "source": s, "metadata": {}, "outputs": [], "execution_count": None}
            for s in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (lab.root / name).write_text(json.dumps(notebook))
    open_lab(page, lab, f"lab/tree/{name}")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'",
        timeout=60_000,
    )


def test_monitor_renders_updates_and_stops_when_its_output_is_cleared(page, lab_factory):
    lab = lab_factory()
    _open_notebook(page, lab, "monitor.ipynb", CELLS)
    _run_cell(page, 0)
    _run_cell(page, 1)
    output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output")
    output.locator(".widget-label", has_text="GPU 1: NVIDIA H200").wait_for()
    assert output.locator(".widget-hprogress").count() == 4  # utilisation and memory, per GPU
    assert "37 %" in output.inner_text() and "simulated readings" in output.inner_text()
    first = output.locator(".widget-label", has_text="updated").inner_text()
    deadline = time.monotonic() + 10
    while output.locator(".widget-label", has_text="updated").inner_text() == first:
        assert time.monotonic() < deadline, "the monitor never updated in the browser"
        time.sleep(0.2)
    screenshot(page, "gpu-monitor")
    page.locator(".jp-Notebook .jp-Cell").nth(1).screenshot(path=str(SCREENSHOTS / "gpu-monitor-cell.png"))
    assert _threads(page) == "monitor threads: 1"

    page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    deadline = time.monotonic() + 20
    while (threads := _threads(page)) != "monitor threads: 0":
        assert time.monotonic() < deadline, f"clearing the output did not stop the monitor: {threads}"
        time.sleep(0.5)


@pytest.mark.skipif(has_gpu(), reason="the kernel would read this machine's GPUs")
def test_monitor_without_a_gpu_shows_the_servers_simulated_readings(page, lab_factory):
    """No NVML in the kernel (this machine has no GPU): `%gpu_monitor` reads what the server's
    simulated backend replays, and says so."""
    lab = lab_factory()
    _open_notebook(page, lab, "demo.ipynb", ["%load_ext jupyter_gpu", "%gpu_monitor --interval 0.5"])
    _run_cell(page, 0)
    _run_cell(page, 1)
    output = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea-output")
    output.locator(".widget-label", has_text="GPU 1: NVIDIA H200").wait_for()
    assert "the Jupyter server's simulated readings" in output.inner_text()
    assert "3.00 / 140 GiB" in output.inner_text()  # GPU 0 of the server's replayed reading
