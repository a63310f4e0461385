"""Notebook 7 (`jupyter notebook`, built on JupyterLab's extension system), under a non-root
base_url: the GPU panel opens from View › Left Sidebar › Show GPU on the file browser page, and the
GPU Dashboard from the command palette, as a tab of that page beside Files and Running (from a
notebook's page, whose main area holds the notebook, in a new browser tab). Skipped where the
`notebook` package is not installed (`pip install notebook`)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from support.browser import run_from_palette, screenshot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(importlib.util.find_spec("notebook") is None, reason="Notebook 7 is not installed"),
]


@pytest.fixture(scope="module")
def server(lab_factory):
    return lab_factory(app="notebook", base_url="/user/nb7/")


def open_page(page, server, path: str) -> None:
    page.goto(server.lab_url(path))
    wait_started(page)


def wait_started(page) -> None:
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started !== undefined")
    page.evaluate("() => window.jupyterapp.restored")


def assert_dashboard_charts(page) -> None:
    """Every GPU's six charts, drawn from the server's samples."""
    dashboard = page.locator("#jupyter-gpu-dashboard")
    dashboard.wait_for(state="visible")
    gpus = dashboard.locator(".jp-gpu-dashboard-gpu")
    gpus.nth(1).wait_for()
    assert gpus.count() == 2
    for kind in ("utilisation", "memory", "power", "temperature", "clock", "pcie"):
        dashboard.locator(f".jp-gpu-chart-{kind} canvas").first.wait_for()
    page.wait_for_function(
        """() => Number(document.querySelector('#jupyter-gpu-dashboard .jp-gpu-chart-utilisation')
                 ?.dataset.samples) >= 2"""
    )
    assert dashboard.locator(".jp-gpu-simulated").is_visible()


def test_notebook7_opens_the_panel_from_the_view_menu(page, server):
    open_page(page, server, "tree")
    page.locator('.lm-MenuBar-itemLabel:text-is("View")').click()
    page.locator('.lm-Menu-itemLabel:text-is("Left Sidebar")').hover()
    page.locator('.lm-Menu-itemLabel:text-is("Show GPU")').click()
    panel = page.locator("#jupyter-gpu-panel")
    panel.wait_for(state="visible")
    panel.locator(".jp-gpu-card").first.wait_for()
    panel.locator(".jp-gpu-chart-utilisation canvas").first.wait_for()
    assert panel.locator(".jp-gpu-simulated").is_visible()
    screenshot(page, "notebook7-panel")


def test_notebook7_opens_the_dashboard_as_a_tab_of_the_file_browser_page(page, server):
    open_page(page, server, "tree")
    run_from_palette(page, "GPU Dashboard", shows="#jupyter-gpu-dashboard")
    assert_dashboard_charts(page)
    tabs = page.locator(".jp-TreePanel > .lm-TabBar .lm-TabBar-tabLabel")
    assert tabs.all_inner_texts()[:2] == ["Files", "Running"]
    assert "GPU Dashboard" in tabs.all_inner_texts()
    screenshot(page, "notebook7-dashboard")

    # back to Files and again from the palette: the same tab comes forward, not a second one
    page.locator('.jp-TreePanel .lm-TabBar-tab:has-text("Files")').click()
    page.locator("#jupyter-gpu-dashboard").wait_for(state="hidden")
    run_from_palette(page, "GPU Dashboard", shows="#jupyter-gpu-dashboard")
    assert page.locator("#jupyter-gpu-dashboard").count() == 1


def test_notebook7_opens_the_dashboard_from_a_notebook_in_a_new_browser_tab(page, server):
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook = {"cells": [], "metadata": {"kernelspec": kernelspec}, "nbformat": 4, "nbformat_minor": 5}
    (server.root / "plain.ipynb").write_text(json.dumps(notebook))
    open_page(page, server, "notebooks/plain.ipynb")
    # the kernel is up (its start would take the focus, and so close the palette)
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel?.status === 'idle'",
        timeout=60_000,
    )
    with page.context.expect_page() as opened:
        run_from_palette(page, "GPU Dashboard")
    tab = opened.value
    wait_started(tab)
    assert tab.url.startswith(f"{server.url}tree?gpu-dashboard"), tab.url
    assert_dashboard_charts(tab)
    assert page.locator("#jupyter-gpu-dashboard").count() == 0  # the notebook's page is unchanged
    screenshot(tab, "notebook7-dashboard-from-notebook")
