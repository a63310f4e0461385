"""The GPU sidebar panel and status-bar item in a real JupyterLab, fed by the simulated backend
(replaying tests/fixtures/nvml_readings_2gpu.json: two H200s), under a non-root base_url as on
JupyterHub."""

from __future__ import annotations

import re
import time

import pytest
from support.browser import allocator_stats_published, open_gpu_panel, open_lab, run_page_until, screenshot

pytestmark = pytest.mark.browser

BASE_URL = "/jh/user/tester/"
GIB = 1024**3


@pytest.fixture(scope="module")
def lab(lab_factory):
    return lab_factory(base_url=BASE_URL)


def card(page, index: int):
    return page.locator(f'.jp-gpu-card[data-gpu-index="{index}"]')


def value(locator, field: str):
    return locator.locator(f'[data-field="{field}"]')


def gpu_api_calls(page) -> list[tuple[float, str]]:
    """(time, route) of every request the page makes to api/gpu/, from now on."""
    calls: list[tuple[float, str]] = []

    def record(request) -> None:
        if "/api/gpu/" in request.url:
            calls.append((time.monotonic(), request.url.split("/api/gpu/")[1].split("?")[0]))

    page.on("request", record)
    return calls


def test_cards_show_each_gpu_with_its_readings(page, lab):
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/api/gpu/" in r.url else None)
    open_lab(page, lab)
    open_gpu_panel(page)

    panel = page.locator("#jupyter-gpu-panel")
    panel.locator(".jp-gpu-card").first.wait_for()
    assert panel.locator(".jp-gpu-card").count() == 2
    assert panel.locator(".jp-gpu-simulated").inner_text().lower() == "simulated"
    assert value(panel, "driver").inner_text() == "driver 580.159.04 · CUDA 13.0"

    gpu0 = card(page, 0)
    assert gpu0.locator(".jp-gpu-index").inner_text() == "GPU 0"
    assert gpu0.locator(".jp-gpu-name").inner_text() == "NVIDIA H200"
    # memory info v2: 3,222,077,440 B used of 150,754,820,096 B
    assert value(gpu0, "memory_used_bytes").inner_text() == "3.00 / 140 GiB"
    assert value(gpu0, "utilization_gpu_percent").inner_text() == "0%"
    assert value(gpu0, "temperature_celsius").inner_text() == "38 °C"
    assert value(gpu0, "power_watts").inner_text() == "124 / 700 W"
    assert value(gpu0, "clock_sm_mhz").inner_text() == "1.98 GHz"
    assert value(gpu0, "clock_mem_mhz").inner_text() == "3.20 GHz"
    # PCIe arrives on the sampler's slow cadence (KiB/s from NVML, bytes/s in the API)
    page.wait_for_function(
        """() => document.querySelector('.jp-gpu-card[data-gpu-index="1"] [data-field="pcie_rx_bytes_per_second"]')
                 ?.textContent === '562 KiB/s'"""
    )
    assert value(card(page, 1), "pcie_tx_bytes_per_second").inner_text() == "1.28 MiB/s"
    assert value(card(page, 1), "power_watts").inner_text() == "77 / 700 W"

    # H200 has no fan: shown as not supported, with NVML's reason as the tooltip
    fan = value(gpu0, "fan_speed_percent")
    assert fan.inner_text() == "not supported"
    assert fan.get_attribute("title") == "not supported on this GPU"

    # the charts draw the server's history: per GPU utilisation, really busy (the readings have
    # GPM: SM and tensor-core activity) and memory
    page.wait_for_function(
        """() => [...document.querySelectorAll('#jupyter-gpu-panel .jp-gpu-timechart')]
                 .filter(c => c.querySelector('canvas') && Number(c.dataset.samples) >= 2).length === 6"""
    )
    screenshot(page, "panel-simulated-light")

    # every request went under the non-root base_url
    assert requests and all(f"{BASE_URL}api/gpu/" in url for url in requests)


def test_status_bar_shows_busiest_gpu_and_opens_the_panel(page, lab):
    open_lab(page, lab)
    status = page.locator(".jp-gpu-status")
    page.wait_for_function(
        "() => /GPU \\d: /.test(document.querySelector('.jp-gpu-status')?.textContent || '')"
    )
    # both GPUs idle: the one with more memory in use wins
    assert status.inner_text() == "GPU 0: 0% · 3.00 / 140 GiB · sim"
    assert "simulated" in status.get_attribute("title")

    if page.locator("#jupyter-gpu-panel").is_visible():  # restored from an earlier test
        page.locator('.jp-SideBar li[data-id="jupyter-gpu-panel"]').click()
    page.locator("#jupyter-gpu-panel").wait_for(state="hidden")
    status.click()
    page.locator("#jupyter-gpu-panel").wait_for(state="visible")
    screenshot(page, "status-bar-opens-panel")


def test_kernel_memory_is_listed_by_notebook_and_opens_it(page, lab):
    kernel_id = lab.start_notebook_kernel("course/week1/train.ipynb")
    attached = lab.api(
        "POST", "api/gpu-test/attach", {"kernel_id": kernel_id, "gpu_index": 1, "bytes": 2 * GIB}
    )
    open_lab(page, lab)
    open_gpu_panel(page)

    row = page.locator(f'.jp-gpu-kernel[data-kernel-id="{kernel_id}"]')
    row.wait_for(timeout=30_000)
    assert row.locator(".jp-gpu-link").inner_text() == "train.ipynb"
    assert value(row, "kernel-memory").inner_text() == "2.00 GiB"
    assert "GPU 1: 2.00 GiB" in row.inner_text()
    assert f"pid {attached['pid']}" in row.inner_text()
    # the kernel has not loaded jupyter_gpu: no allocator figures, and how to get them
    assert "%load_ext jupyter_gpu" in value(row, "allocator-missing").inner_text()

    # a process that belongs to no kernel of this server is listed by its pid
    other = page.locator('.jp-gpu-process[data-pid="564"]')
    assert value(other, "process-memory").inner_text() == "2.99 GiB"
    assert "GPU 0" in other.inner_text()
    # and why: NVML's PID is of no process here, and the kernel has not loaded the extension
    assert (
        "1 of this server's kernels has not loaded jupyter_gpu" in value(other, "process-reason").inner_text()
    )

    # allocator figures as the kernel agent publishes them (PyTorch's UUID has no GPU- prefix)
    device = {
        "index": 0,
        "uuid": "d57917b3-7a1d-3f45-579e-d0c856ed9f9d",
        "allocated_bytes": 3 * GIB // 2,
        "reserved_bytes": 2 * GIB,
        "active_bytes": 3 * GIB // 2,
        "requested_bytes": 3 * GIB // 2,
        "inactive_split_bytes": GIB // 4,
        "reserved_unallocated_bytes": GIB // 2,
        "num_alloc_retries": 0,
        "num_ooms": 1,
        "peak_allocated_bytes": 2 * GIB,
        "fragmentation": 0.125,
    }
    with allocator_stats_published(lab, kernel_id, attached["pid"], [device]):
        allocator = value(row, "allocator")
        allocator.wait_for(timeout=30_000)
        text = allocator.inner_text()
        assert "GPU 1 (cuda:0)" in text
        assert "allocated 1.50 GiB" in text and "cached 2.00 GiB" in text
        assert "fragmented 13%" in text
        assert "1 out-of-memory error" in text
        screenshot(page, "panel-who-holds-memory")

    row.locator(".jp-gpu-link").click()
    page.locator('.jp-mod-current.lm-TabBar-tab:has-text("train.ipynb")').wait_for()
    page.locator(".jp-NotebookPanel").first.wait_for(state="visible")


def test_settings_choose_gpus_and_units(page, lab):
    """User settings (as the settings editor saves them) are applied: only GPU 1, decimal units."""
    settings = lab.tmp / "settings" / "jupyter-gpu" / "plugin.jupyterlab-settings"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text('{"gpus": [1], "memoryUnits": "decimal"}')
    try:
        open_lab(page, lab)
        open_gpu_panel(page)
        card(page, 1).wait_for()
        assert page.locator(".jp-gpu-card").count() == 1
        assert value(card(page, 1), "memory_used_bytes").inner_text() == "3.41 MB / 151 GB"
        page.wait_for_function(
            "() => (document.querySelector('.jp-gpu-status')?.textContent || '').startsWith('GPU 1: ')"
        )
        assert page.locator(".jp-gpu-status").inner_text() == "GPU 1: 0% · 3.41 MB / 151 GB · sim"
        stored = lab.api("GET", "lab/api/settings/jupyter-gpu:plugin")
        assert stored["schema"]["properties"]["refreshInterval"]["default"] == 2
        assert stored["settings"] == {"gpus": [1], "memoryUnits": "decimal"}
    finally:
        settings.unlink()


def test_lost_gpu_is_a_state_and_recovers(page, lab):
    open_lab(page, lab)
    open_gpu_panel(page)
    card(page, 1).wait_for()
    lab.api("POST", "api/gpu-test/lose", {"gpu_index": 1, "lost": True})
    try:
        alert = value(card(page, 1), "state")
        alert.wait_for()
        assert "lost" in alert.inner_text()
        assert "jp-gpu-state-lost" in card(page, 1).get_attribute("class")
        assert card(page, 0).locator(".jp-gpu-error").count() == 0
        screenshot(page, "panel-gpu-lost")
    finally:
        lab.api("POST", "api/gpu-test/lose", {"gpu_index": 1, "lost": False})
    value(card(page, 1), "state").wait_for(state="detached", timeout=60_000)
    assert value(card(page, 1), "temperature_celsius").inner_text() == "37 °C"


def test_dark_theme(page, lab):
    open_lab(page, lab)
    open_gpu_panel(page)
    card(page, 0).wait_for()
    light = _background_luminance(page)
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
    )
    page.wait_for_selector('body[data-jp-theme-light="false"]', state="attached")
    page.wait_for_function(
        """() => {
          const c = getComputedStyle(document.querySelector('.jp-gpu-card')).backgroundColor;
          const [r, g, b] = c.match(/\\d+/g).map(Number);
          return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255 < 0.3;
        }"""
    )
    dark = _background_luminance(page)
    assert light > 0.7 and dark < 0.3
    text = page.evaluate("() => getComputedStyle(document.querySelector('.jp-gpu-card .jp-gpu-name')).color")
    assert _luminance(text) > 0.5, f"card text is not light on dark: {text}"
    screenshot(page, "panel-simulated-dark")
    page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})"
    )
    page.wait_for_selector('body[data-jp-theme-light="true"]', state="attached")


def _luminance(css_color: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css_color)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def _background_luminance(page) -> float:
    return _luminance(
        page.evaluate("() => getComputedStyle(document.querySelector('.jp-gpu-card')).backgroundColor")
    )


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 1) for a, b in zip(times, times[1:])]


def test_polling_pauses_while_hidden_backs_off_and_recovers(page, lab):
    calls = gpu_api_calls(page)
    open_lab(page, lab)
    open_gpu_panel(page)
    card(page, 0).wait_for()

    # panel hidden: the status bar keeps telemetry going, and "who holds memory" at its own
    # slower pace (the status bar shows what idle kernels hold)
    page.locator('.jp-SideBar li[data-id="jupyter-gpu-panel"]').click()
    page.locator("#jupyter-gpu-panel").wait_for(state="hidden")
    hidden_at = len(calls)

    def after_hiding(route: str) -> int:
        return [name for _, name in calls[hidden_at:]].count(route)

    # four telemetry polls, 2 s apart, span more than the 5 s of the kernels poll
    run_page_until(page, "4 telemetry requests with the panel hidden", lambda: after_hiding("telemetry") >= 4)
    assert after_hiding("kernels") <= 2

    # server unreachable: an error is shown and the retries slow down
    failures: list[float] = []

    def refuse(route):
        failures.append(time.monotonic())
        route.abort("connectionrefused")

    page.route("**/api/gpu/telemetry*", refuse)
    page.locator(".jp-gpu-status").click()
    error = page.locator("#jupyter-gpu-panel .jp-gpu-error")
    error.wait_for()
    assert "Cannot reach the Jupyter server" in error.inner_text()
    # Lumino's backoff draws each wait from [2 s, 3 × the last wait] (at most 30 s): without it
    # the retries come every 2 s for ever; with it, one soon waits twice as long.
    run_page_until(
        page,
        f"a retry 4 s or more after the last (backoff); retries at intervals {_gaps(failures)}",
        lambda: any(gap >= 4 for gap in _gaps(failures)),
        timeout_s=60,
        event="requestfailed",
    )
    # opening the panel asks at once (the first gap); after that, never faster than the interval
    assert min(_gaps(failures)[1:], default=2) >= 1, f"retries at intervals {_gaps(failures)}"
    screenshot(page, "panel-server-unreachable")

    # back: the panel recovers by itself
    page.unroute("**/api/gpu/telemetry*")
    error.wait_for(state="detached", timeout=40_000)
    assert card(page, 0).is_visible()


def test_keeps_working_when_the_server_restarts(page, lab):
    open_lab(page, lab)
    open_gpu_panel(page)
    card(page, 0).wait_for()
    lab.stop()
    error = page.locator("#jupyter-gpu-panel .jp-gpu-error")
    error.wait_for(timeout=30_000)
    lab.start()
    error.wait_for(state="detached", timeout=45_000)
    assert value(card(page, 0), "temperature_celsius").inner_text() == "38 °C"
    screenshot(page, "panel-after-server-restart")


def test_the_open_panel_polls_at_its_intervals(page, lab):
    """Defaults: telemetry every 2 s, who-holds-memory every 5 s; no faster, and it keeps going.
    (How fast the first numbers come and the request rate over time: benchmarks/panel.py.)"""
    calls = gpu_api_calls(page)
    open_lab(page, lab)
    open_gpu_panel(page)
    card(page, 0).wait_for()
    start = len(calls)

    def times(route: str) -> list[float]:
        return [t for t, name in calls[start:] if name == route]

    run_page_until(
        page,
        "2 kernels and 3 telemetry requests with the panel open",
        lambda: len(times("kernels")) >= 2 and len(times("telemetry")) >= 3,
    )
    telemetry, kernels = _gaps(times("telemetry")), _gaps(times("kernels"))
    assert min(kernels) >= 4, f"kernels requested at intervals {kernels}"
    assert min(telemetry) >= 1.5, f"telemetry requested at intervals {telemetry}"
