"""Numbers at once (#32): the status bar's first figures come with the page (the server puts its
latest sample in the page's settings), not from the first telemetry request; figures the server
could not confirm since are greyed and say why."""

from __future__ import annotations

import json
import re

import pytest
from support.browser import open_lab, run_page_until, screenshot

pytestmark = pytest.mark.browser

STATUS = re.compile(r"GPU (\d): (\d+)% · .+ · sim")


@pytest.fixture(scope="module")
def lab(lab_factory):
    return lab_factory()


def seeded_figures(page) -> set[tuple[str, str]]:
    """(GPU index, utilisation %) of each GPU in the sample the page came with."""
    config = json.loads(page.locator("#jupyter-config-data").text_content())
    gpus = json.loads(config["jupyterGpuTelemetry"])["latest"]["gpus"]
    return {(str(g["index"]), str(round(g["utilization_gpu_percent"]))) for g in gpus}


def status_figures(page) -> tuple[str, str]:
    page.wait_for_function(
        "() => /GPU \\d: \\d+%/.test(document.querySelector('.jp-gpu-status')?.textContent || '')"
    )
    text = page.locator(".jp-gpu-status").inner_text()
    match = STATUS.fullmatch(text)
    assert match, text
    return match.group(1), match.group(2)


def test_the_status_bar_shows_the_pages_figures_while_telemetry_is_held_back(page, lab):
    held: list = []
    page.route("**/api/gpu/telemetry*", lambda route: held.append(route))  # not answered until released
    open_lab(page, lab)
    run_page_until(page, "the first telemetry request", lambda: bool(held))
    assert status_figures(page) in seeded_figures(page)
    assert "jp-gpu-stale" not in (page.locator(".jp-gpu-status").get_attribute("class") or "")
    screenshot(page, "status-bar-from-the-page")

    # released: the first poll, which asked for the whole history (for the charts), is answered
    assert "since=" not in held[0].request.url
    with page.expect_response(lambda r: r.url == held[0].request.url) as first:
        for route in held:
            route.continue_()
    page.unroute("**/api/gpu/telemetry*")
    assert first.value.ok and json.loads(first.value.body())["history"]
    status_figures(page)


def test_figures_the_server_cannot_confirm_are_greyed_and_say_why(page, lab):
    page.route("**/api/gpu/telemetry*", lambda route: route.abort("connectionrefused"))
    open_lab(page, lab)
    assert status_figures(page) in seeded_figures(page)
    status = page.locator(".jp-gpu-status.jp-gpu-stale")
    status.wait_for()
    assert "Cannot reach the Jupyter server" in status.get_attribute("title")
