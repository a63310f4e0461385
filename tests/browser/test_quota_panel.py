"""Fair share in the panel (issue #28): each kernel's GPU memory against the quota the server
starts kernels with, marked when the kernel holds more (memory PyTorch does not govern), and the
GPU the server assigned it; and the notices the owner gets: a kernel over its quota, the Hub's
warning before it stops her server."""

from __future__ import annotations

import pytest
from support.browser import open_gpu_panel, open_lab, open_lab_listening, screenshot

pytestmark = pytest.mark.browser

GIB = 2**30


def test_each_kernel_shows_its_memory_against_the_quota(page, lab_factory):
    lab = lab_factory(gpu={"kernel_memory_limit": GIB, "assign_gpus": "least_used"})
    within = lab.start_notebook_kernel("course/small.ipynb")
    over = lab.start_notebook_kernel("course/big.ipynb")
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": within, "gpu_index": 1, "bytes": GIB // 2})
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": over, "gpu_index": 1, "bytes": 3 * GIB})
    open_lab(page, lab)
    open_gpu_panel(page)

    def chip(kernel_id: str):
        row = page.locator(f'.jp-gpu-kernel[data-kernel-id="{kernel_id}"]')
        row.wait_for(timeout=30_000)
        return row.locator('[data-field="kernel-gpu-memory"]')

    assert chip(within).inner_text() == "GPU 1: 512 MiB of 1.00 GiB quota"
    assert "jp-gpu-warn" not in chip(within).get_attribute("class")
    assert chip(over).inner_text() == "GPU 1: 3.00 GiB of 1.00 GiB quota"
    assert "jp-gpu-warn" in chip(over).get_attribute("class")
    assert "this kernel holds more" in chip(over).get_attribute("title")
    # GPU 1 had the most free memory when each started (the first holds nothing yet: 1 GiB promised)
    for kernel_id in (within, over):
        row = page.locator(f'.jp-gpu-kernel[data-kernel-id="{kernel_id}"]')
        assert row.locator('[data-field="assigned-gpu"]').inner_text() == "assigned GPU 1"
    screenshot(page, "panel-kernel-quota")


def test_the_owner_is_told_when_a_kernel_goes_over_its_quota(page, lab_factory):
    lab = lab_factory(gpu={"kernel_memory_limit": GIB, "over_limit_grace": 0.0})
    open_lab_listening(page, lab)
    kernel_id = lab.start_notebook_kernel("course/cupy.ipynb")
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": kernel_id, "gpu_index": 1, "bytes": 3 * GIB})
    told = page.get_by_text("The kernel of course/cupy.ipynb is over the quota: it held 3.00 GiB on GPU 1")
    told.wait_for(timeout=30_000)
    screenshot(page, "notification-kernel-over-quota")


def test_the_student_is_told_before_the_hub_stops_her_server(page, lab_factory):
    """What the Hub's idle-server culler posts (tests/test_hub_culler.py sends it for real),
    shown as JupyterLab shows the quota's notice."""
    lab = lab_factory()
    open_lab_listening(page, lab)
    notice = {
        "stop_in_seconds": 60,
        "reason": "every kernel idle for at least 30 min",
        "by": "the Hub's idle culler",
    }
    lab.api("POST", "api/gpu/notices/server-stop", notice)
    told = page.get_by_text(
        "Your server will be stopped in 1 min 0 s by the Hub's idle culler: every kernel idle for "
        "at least 30 min. Run a cell to keep it."
    )
    told.wait_for(timeout=30_000)
    screenshot(page, "notification-server-stop")
