"""Benchmark the GPU panel in a real browser: time to first numbers, and what it asks the server.

    python benchmarks/panel.py [--loads 5] [--window 30]

Starts `jupyter lab` with jupyter_gpu on replayed readings of two H200s (simulated NVML, so it
runs anywhere; the figures are the frontend's and the server's, not the GPU's) and drives
Debian's chromium through Playwright, as the browser tests do. Prints two tables:
1. per page load: when JupyterLab had restored, when the status bar first showed numbers, the
   time between the two (its median is issue #32's figure), and the size of the first telemetry
   reply (the full history); both times are taken in the page (performance.now() when the restore
   promise resolves, and in a MutationObserver the moment `.jp-gpu-status` first shows a figure),
   so no round trip to Playwright is counted;
2. requests per minute to api/gpu/ over --window seconds, with the panel open and with only the
   status bar showing (defaults: telemetry every 2 s, who-holds-memory every 5 s while shown).
Needs the test extra (playwright) and a built labextension, like the browser tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing
sys.path.insert(0, str(ROOT / "tests"))  # the browser tests' server and page helpers (tests/support/)

from support.browser import CHROMIUM, CHROMIUM_ARGS, LabServer, open_gpu_panel, open_lab  # noqa: E402
from telemetry import table  # noqa: E402

# In the page, before any of its scripts: when JupyterLab restored, and when the status bar first
# showed a figure (the mutation that put it there, not when Playwright next looked).
PROBES = """const t = setInterval(() => { if (window.jupyterapp) { clearInterval(t);
  window.jupyterapp.restored.then(() => { window.__restored = performance.now(); }); } }, 5);
const seen = new MutationObserver(() => {
  if (/\\d+%/.test(document.querySelector('.jp-gpu-status')?.textContent || '')) {
    window.__numbers = performance.now(); seen.disconnect(); } });
seen.observe(document, { childList: true, subtree: true, characterData: true });"""
HAS_NUMBERS = "() => /\\d+%/.test(document.querySelector('.jp-gpu-status')?.textContent || '')"
MEASURED = "() => window.__numbers !== undefined && window.__restored !== undefined"


def page_load(browser, lab: LabServer) -> list[float]:
    """One fresh page: restored ms, first numbers ms, numbers - restored, first telemetry reply bytes."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.add_init_script(PROBES)
    with page.expect_response(lambda r: "/api/gpu/telemetry" in r.url, timeout=60_000) as first:
        open_lab(page, lab)
    size = len(first.value.body())
    page.wait_for_function(MEASURED, timeout=60_000)
    restored, numbers = page.evaluate("() => [window.__restored, window.__numbers]")
    context.close()
    return [restored, numbers, numbers - restored, float(size)]


def request_rate(browser, lab: LabServer, window: float, panel_open: bool) -> dict[str, float]:
    """Requests per minute to each api/gpu/ route during ``window`` seconds."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    open_lab(page, lab)
    page.wait_for_function(HAS_NUMBERS, timeout=60_000)
    if panel_open:
        open_gpu_panel(page)
        page.locator(".jp-gpu-card").first.wait_for()
    elif page.locator("#jupyter-gpu-panel").is_visible():  # restored from the last page
        page.locator('.jp-SideBar li[data-id="jupyter-gpu-panel"]').click()
    routes: list[str] = []
    page.on(
        "request",
        lambda r: routes.append(r.url.split("/api/gpu/")[1].split("?")[0]) if "/api/gpu/" in r.url else None,
    )
    page.wait_for_timeout(window * 1000)  # the measurement itself
    context.close()
    return {route: routes.count(route) * 60 / window for route in sorted(set(routes))}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loads", type=int, default=5, help="page loads timed")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of requests counted per state")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        lab = LabServer(Path(tmp))
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            loads = [page_load(browser, lab) for _ in range(args.loads)]
            after = [row[2] for row in loads]
            table(
                f"1. Page load to numbers (ms since navigation; simulated 2 x H200), {args.loads} loads: "
                f"restored -> first numbers median {statistics.median(after):.0f} ms",
                [
                    "load",
                    "JupyterLab restored",
                    "first numbers in the status bar",
                    "numbers - restored",
                    "first telemetry reply (bytes)",
                ],
                [[str(i + 1), *(f"{v:.0f}" for v in row)] for i, row in enumerate(loads)],
            )
            rows = []
            for panel_open in (True, False):
                rate = request_rate(browser, lab, args.window, panel_open)
                rows.append(
                    [
                        "panel open" if panel_open else "status bar only",
                        *(f"{rate.get(r, 0):.0f}" for r in ("telemetry", "kernels")),
                        f"{sum(rate.values()):.0f}",
                    ]
                )
            table(
                f"2. Requests per minute over {args.window:g} s",
                ["shown", "telemetry", "kernels", "all api/gpu/"],
                rows,
            )
        finally:
            browser.close()
            lab.stop()


if __name__ == "__main__":
    main()
