"""Notebook 7 (`jupyter notebook`, built on JupyterLab's extension system): the GPU panel opens
from View › Left Sidebar › Show GPU on the file browser page, under a non-root base_url. Skipped
where the `notebook` package is not installed (`pip install notebook`)."""

from __future__ import annotations

import importlib.util

import pytest
from browser_support import (  # noqa: F401  (fixtures are used by name)
    chromium,
    jp_asyncio_loop,
    jp_server_cleanup,
    lab_factory,
    page,
    screenshot,
    screenshots_folder,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(importlib.util.find_spec("notebook") is None, reason="Notebook 7 is not installed"),
]


def test_notebook7_opens_the_panel_from_the_view_menu(page, lab_factory):
    server = lab_factory(app="notebook", base_url="/user/nb7/")
    page.goto(server.lab_url("tree"))
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started !== undefined")
    page.evaluate("() => window.jupyterapp.restored")
    page.locator('.lm-MenuBar-itemLabel:text-is("View")').click()
    page.locator('.lm-Menu-itemLabel:text-is("Left Sidebar")').hover()
    page.locator('.lm-Menu-itemLabel:text-is("Show GPU")').click()
    panel = page.locator("#jupyter-gpu-panel")
    panel.wait_for(state="visible")
    panel.locator(".jp-gpu-card").first.wait_for()
    panel.locator(".jp-gpu-chart-utilisation canvas").first.wait_for()
    assert panel.locator(".jp-gpu-simulated").is_visible()
    screenshot(page, "notebook7-panel")
