"""Fixtures of the browser tests (tests/support/browser.py has what they drive): a headless
chromium per module, `jupyter lab` servers, a page per test (screenshotted where it failed), and
pytest-jupyter's autouse fixtures replaced, since no server runs in this process here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, LabServer, missing, screenshot


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless chromium per test module. Not per session: while Playwright's sync API runs,
    its event loop counts as running in this thread, which would break the pytest-jupyter tests
    that run after these."""
    try:
        from playwright import sync_api
    except ImportError:
        missing("python playwright is not installed (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        missing(f"no chromium at {CHROMIUM} (apt-get install -y chromium, or set CHROMIUM_BIN)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def lab_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LabServer]]:
    """Start `jupyter lab` servers for a test module; all are stopped after it."""
    servers: list[LabServer] = []

    def start(**kwargs: Any) -> LabServer:
        server = LabServer(tmp_path_factory.mktemp("lab"), **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def page(chromium: Any, request: pytest.FixtureRequest, screenshots_folder: Path) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    failed_before = request.session.testsfailed
    yield page
    if request.session.testsfailed > failed_before:
        screenshot(page, f"FAILED-{request.node.name}")
    context.close()


@pytest.fixture(scope="session")
def screenshots_folder(request: pytest.FixtureRequest) -> Iterator[Path]:
    """Prints where the screenshots are once the browser tests are done."""
    yield SCREENSHOTS
    if not any(SCREENSHOTS.glob("*.png")):
        return
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\nbrowser test screenshots: {SCREENSHOTS}")


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> Iterator[None]:
    """Replaces pytest-jupyter's per-test event loop (autouse for every test): these tests talk
    to a server in a subprocess, and closing that loop would fight Playwright's own."""
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    """pytest-jupyter cleans up an in-process ServerApp after every test; there is none here."""
    yield
