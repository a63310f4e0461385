"""What the GPU really did (issue #31), in a real JupyterLab over the simulated backend replaying a
short trace written here from the two-H200 readings: GPU 0 busy for real (a bf16 matmul loop:
SMs and tensor cores busy, traffic on NVLink), GPU 1 launch-bound (a loop of tiny kernels:
utilisation 99% with 0.3% of its SMs active), and GPU 2, a copy without GPU performance monitoring.
The panel's cards draw SM and tensor-core activity beside utilisation and hint at the launch-bound
loop; the dashboard adds the same chart and NVLink throughput beside PCIe; GPU 2 says why it
has neither."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from support.browser import open_gpu_panel, open_lab, screenshot
from support.paths import READINGS

from jupyter_gpu.analysis.units import MiB, format_bytes
from jupyter_gpu.nvml.fields import GPM_METRICS
from jupyter_gpu.nvml.gpm import NO_GPM

pytestmark = pytest.mark.browser

GPM_ID = {m.name: str(m.metric_id) for m in GPM_METRICS}


def gpm(sm: float, tensor: float, nvlink_rx_mib: float, nvlink_tx_mib: float) -> dict[str, float]:
    """A frame's GPM figures as NVML gives them: by metric id, in percent and MiB/s."""
    figures = {
        "sm_active_percent": sm,
        "sm_occupancy_percent": sm / 2,
        "tensor_active_percent": tensor,
        "tensor_hmma_active_percent": tensor,  # bf16 runs on HMMA
        "tensor_imma_active_percent": 0.0,
        "tensor_dfma_active_percent": 0.0,
        "dram_active_percent": sm / 3,
        "nvlink_rx_bytes_per_second": nvlink_rx_mib,
        "nvlink_tx_bytes_per_second": nvlink_tx_mib,
        "pcie_rx_bytes_per_second": 1.0,
        "pcie_tx_bytes_per_second": 0.5,
    }
    return {GPM_ID[name]: value for name, value in figures.items()}


# GPU index -> (utilisation %, its GPM figures, or None for a GPU without GPM)
WORK = {
    0: (97, gpm(sm=96.6, tensor=93.7, nvlink_rx_mib=2048, nvlink_tx_mib=1024)),
    1: (99, gpm(sm=0.3, tensor=0.0, nvlink_rx_mib=0, nvlink_tx_mib=0)),
    2: (99, None),
}


@pytest.fixture(scope="module")
def lab(lab_factory, tmp_path_factory):
    readings = json.loads(READINGS.read_text())
    devices = readings["devices"]
    no_gpm = copy.deepcopy(devices[1])  # a GPU before Hopper: no GPM to ask
    del no_gpm["gpm"]
    no_gpm.update(index=2, name="NVIDIA A100-SXM4-80GB", uuid="GPU-a100-0002", pci_bus_id="00000000:00:08.0")
    devices.append(no_gpm)
    frame = []
    for index, device in enumerate(devices):
        utilisation, figures = WORK[index]
        moving = {"utilization": {"gpu": utilisation, "memory": 20}, "power_mw": device["power_mw"]}
        frame.append({**moving, "gpm": figures} if figures else moving)
    # the same figures each frame: whichever sample the hover lands on reads them
    readings["trace"] = {"frame_seconds": 1.0, "frames": [frame, copy.deepcopy(frame)]}
    path: Path = tmp_path_factory.mktemp("readings") / "gpm_trace.json"
    path.write_text(json.dumps(readings))
    return lab_factory(gpu={"simulated_readings": str(path)})


def percent(value: float) -> str:
    """The frontend's fine percentages (format.ts): a tenth below 10%, none for 0."""
    return f"{value:.1f}%" if value and abs(value) < 10 else f"{value:.0f}%"


def rate(mib_per_second: float) -> str:
    return f"{format_bytes(mib_per_second * MiB)}/s"


def expected(index: int, name: str) -> float:
    """A GPU's figure in the trace, in NVML's unit."""
    figures = WORK[index][1]
    assert figures is not None, f"GPU {index} has no GPM"
    return figures[GPM_ID[name]]


def newest_legend(page, chart) -> str:
    """The chart's legend with the pointer on its newest sample, once it has a few."""
    chart.locator("canvas").wait_for()
    page.wait_for_function("el => Number(el.dataset.samples) >= 4", arg=chart.element_handle())
    chart.scroll_into_view_if_needed()
    box = chart.locator(".u-over").bounding_box()
    assert box, "the chart has no plot area"
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
    return chart.locator(".u-legend").inner_text()


def test_cards_show_what_the_sms_and_tensor_cores_really_did(page, lab):
    open_lab(page, lab)
    open_gpu_panel(page)
    card = {i: page.locator(f'.jp-gpu-card[data-gpu-index="{i}"]') for i in WORK}
    card[2].wait_for()

    for i in (0, 1):
        legend = newest_legend(page, card[i].locator(".jp-gpu-chart-activity"))
        sm, tensor = (percent(expected(i, f)) for f in ("sm_active_percent", "tensor_active_percent"))
        assert re.search(rf"SM active\s*{re.escape(sm)}", legend), legend
        assert re.search(rf"tensor active\s*{re.escape(tensor)}", legend), legend
        assert (
            card[i].locator('[data-field="sm_active_percent"]').inner_text() == f"SM {sm} · tensor {tensor}"
        )

    # a hover says what each figure means: any kernel running, against SMs and tensor cores busy
    label = card[0].locator('[data-field="really-busy"] .jp-gpu-chart-label span').first
    assert label.inner_text() == "Really busy"
    meanings = label.get_attribute("title").splitlines()
    assert [m.split(":")[0] for m in meanings] == ["SM active", "tensor active"], meanings
    utilisation = card[0].locator(".jp-gpu-chart-label span", has_text="Utilisation")
    assert "any kernel" in utilisation.get_attribute("title")
    legend_rows = card[0].locator(".jp-gpu-chart-activity .u-legend .u-series")
    assert legend_rows.nth(1).get_attribute("title") == meanings[0]

    # the hint: on the launch-bound GPU only, with what it saw
    hint = card[1].locator('[data-field="launch-bound"]')
    hint.wait_for()
    saw = f"{WORK[1][0]}% utilisation, {percent(expected(1, 'sm_active_percent'))} SM active"
    assert hint.inner_text().startswith(f"Busy but mostly idle SMs: {saw}"), hint.inner_text()
    assert card[0].locator('[data-field="launch-bound"]').count() == 0

    # without GPM, the reason stands in place of the chart, and no hint is guessed
    assert card[2].locator('[data-field="gpm"]').inner_text() == f"not supported: {NO_GPM}"
    assert card[2].locator(".jp-gpu-chart-activity").count() == 0
    assert card[2].locator('[data-field="launch-bound"]').count() == 0
    assert card[2].locator(".jp-gpu-chart-utilisation canvas").count() == 1  # utilisation stays

    card[1].locator('[data-field="really-busy"]').scroll_into_view_if_needed()
    screenshot(page, "panel-gpu-activity")
    card[2].locator('[data-field="gpm"]').scroll_into_view_if_needed()
    screenshot(page, "panel-gpu-activity-no-gpm")


def test_dashboard_shows_really_busy_and_nvlink_for_every_gpu(page, lab):
    open_lab(page, lab)
    page.evaluate("async () => { await window.jupyterapp.commands.execute('jupyter-gpu:dashboard'); }")
    dashboard = page.locator("#jupyter-gpu-dashboard")
    gpu = {i: dashboard.locator(f'.jp-gpu-dashboard-gpu[data-gpu-index="{i}"]') for i in WORK}
    gpu[2].wait_for()
    for i in (0, 1):
        titles = gpu[i].locator(".jp-gpu-dashboard-chart > .jp-gpu-chart-label").all_inner_texts()
        assert titles[:2] == ["Utilisation", "Really busy"], titles
        assert titles.index("NVLink") == titles.index("PCIe") + 1, titles  # beside PCIe
        legend = newest_legend(page, gpu[i].locator(".jp-gpu-chart-nvlink"))
        for way in ("rx", "tx"):
            shown = rate(expected(i, f"nvlink_{way}_bytes_per_second"))
            assert re.search(rf"{way}\s*{re.escape(shown)}", legend), legend
        legend = newest_legend(page, gpu[i].locator(".jp-gpu-chart-activity"))
        sm = percent(expected(i, "sm_active_percent"))
        assert re.search(rf"SM active\s*{re.escape(sm)}", legend), legend
    nvlink = gpu[0].locator('.jp-gpu-chart-label:text-is("NVLink")').get_attribute("title")
    assert "received (rx)" in nvlink and "sent (tx)" in nvlink, nvlink  # what the hover explains
    gpu[1].locator('[data-field="launch-bound"]').wait_for()
    assert gpu[0].locator('[data-field="launch-bound"]').count() == 0

    # GPU 2: both GPM charts give way to the reason
    assert gpu[2].locator('[data-field="gpm"]').all_inner_texts() == [f"not supported: {NO_GPM}"] * 2
    assert gpu[2].locator(".jp-gpu-chart-activity, .jp-gpu-chart-nvlink").count() == 0

    screenshot(page, "dashboard-gpu-activity")  # the pointer on GPU 1's newest activity
    newest_legend(page, gpu[0].locator(".jp-gpu-chart-nvlink"))
    screenshot(page, "dashboard-gpu-nvlink")
    gpu[2].evaluate("el => el.scrollIntoView({block: 'start'})")
    screenshot(page, "dashboard-gpu-activity-no-gpm")
