"""Idle kernels on GPU memory in a real JupyterLab (issue #14): the panel marks a kernel idle on
(simulated) GPU memory, offers free cache / interrupt / restart / shut down, each behind a
confirmation that says what will be lost, the status bar shows what idle kernels hold, and the
GPU culler's shutdown reaches the user as a JupyterLab notification."""

from __future__ import annotations

import re

import pytest
from support.browser import open_gpu_panel, open_lab, open_lab_listening, run_page_until, screenshot

pytestmark = pytest.mark.browser

GIB = 1024**3


@pytest.fixture(scope="module")
def lab(lab_factory):
    return lab_factory(base_url="/hub/user/idle/", gpu={"idle_after": 1.0, "idle_min_memory": GIB})


def kernel_row(page, kernel_id: str):
    return page.locator(f'.jp-gpu-kernel[data-kernel-id="{kernel_id}"]')


def holding_kernel(lab, path: str, nbytes: int = 2 * GIB) -> str:
    kernel_id = lab.start_notebook_kernel(path)
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": kernel_id, "gpu_index": 1, "bytes": nbytes})
    return kernel_id


def dialog(page):
    box = page.locator(".jp-Dialog")
    box.wait_for()
    return box


def test_an_idle_kernel_on_gpu_memory_is_marked_in_the_panel_and_the_status_bar(page, lab):
    kernel_id = holding_kernel(lab, "course/week1.ipynb", 38 * GIB)
    try:
        open_lab(page, lab)
        open_gpu_panel(page)
        row = kernel_row(page, kernel_id)
        mark = row.locator('[data-field="idle-holding"]')
        mark.wait_for(timeout=30_000)
        assert re.fullmatch(r"idle \d+ s · holding 38\.0 GiB", mark.inner_text()), mark.inner_text()
        assert "jp-gpu-idle-holder" in row.get_attribute("class")
        page.wait_for_function(
            "() => (document.querySelector('.jp-gpu-status')?.textContent || '').endsWith(' · idle 38.0 GiB')"
        )
        assert "Idle kernels hold 38.0 GiB of GPU memory" in page.locator(".jp-gpu-status").get_attribute(
            "title"
        )
        row.scroll_into_view_if_needed()
        screenshot(page, "panel-idle-holder")
    finally:
        lab.api("DELETE", f"api/kernels/{kernel_id}")


def test_each_action_asks_first_and_says_what_will_be_lost(page, lab):
    kernel_id = holding_kernel(lab, "course/train.ipynb")
    lab.api("POST", "api/gpu-test/execute", {"kernel_id": kernel_id, "code": "%load_ext jupyter_gpu"})
    open_lab(page, lab)
    open_gpu_panel(page)
    row = kernel_row(page, kernel_id)
    row.wait_for(timeout=30_000)

    # free cache: asked, then answered by the kernel's comm target (CUDA is not in use here)
    row.locator('[data-action="free-cache"]').click()
    box = dialog(page)
    assert box.locator(".jp-Dialog-header").inner_text() == "Free the GPU cache of train.ipynb?"
    assert "Nothing is lost" in box.inner_text()
    screenshot(page, "confirm-free-cache")
    box.get_by_role("button", name="Free cache").click()
    result = row.locator('[data-field="action-result"]')
    result.wait_for()
    assert result.inner_text() == (
        "Nothing to free: PyTorch has not initialised CUDA in this kernel: it holds no cached GPU memory."
    )

    # interrupt, cancelled: nothing happens
    row.locator('[data-action="interrupt"]').click()
    box = dialog(page)
    assert "KeyboardInterrupt" in box.inner_text()
    box.get_by_role("button", name="Cancel").click()
    box.wait_for(state="detached")

    # restart: the kernel's state goes, and the dialog says so with the memory it frees
    pid = next(k["pid"] for k in lab.api("GET", "api/gpu/kernels")["kernels"] if k["id"] == kernel_id)
    row.locator('[data-action="restart"]').click()
    box = dialog(page)
    assert "Every variable and tensor in this kernel is lost, and the 2.00 GiB" in box.inner_text()
    box.get_by_role("button", name="Restart").click()
    box.wait_for(state="detached")
    run_page_until(
        page,
        "the kernel to come back with a new process",
        lambda: _pid(lab, kernel_id) not in (None, pid),
    )

    # shut down (the restarted process holds nothing: give it memory again so it is listed)
    lab.api("POST", "api/gpu-test/attach", {"kernel_id": kernel_id, "gpu_index": 1, "bytes": 2 * GIB})
    row.locator('[data-action="shutdown"]').wait_for(timeout=30_000)
    row.locator('[data-action="shutdown"]').click()
    box = dialog(page)
    assert box.locator(".jp-Dialog-header").inner_text() == "Shut down the kernel of train.ipynb?"
    assert "The notebook file is not changed" in box.inner_text()
    screenshot(page, "confirm-shut-down")
    box.get_by_role("button", name="Shut down").click()
    row.wait_for(state="detached", timeout=30_000)
    assert all(k["id"] != kernel_id for k in lab.api("GET", "api/kernels"))


def _pid(lab, kernel_id: str) -> int | None:
    kernels = lab.api("GET", "api/gpu/kernels")["kernels"]
    return next((k["pid"] for k in kernels if k["id"] == kernel_id), None)


def test_the_owner_is_notified_when_the_culler_shuts_a_kernel_down(page, lab_factory):
    culling = lab_factory(
        base_url="/hub/user/culled/",
        gpu={"cull_idle_after": 3.0, "cull_min_memory": 0, "cull_warn_before": 2.0, "cull_interval": 0.3},
    )
    open_lab_listening(page, culling)
    holding_kernel(culling, "course/week1.ipynb")
    warned = page.get_by_text(
        re.compile(r"GPU kernel of course/week1\.ipynb will be shut down in \d+ s unless")
    )
    warned.wait_for(timeout=30_000)
    culled = page.get_by_text(
        re.compile(r"GPU kernel of course/week1\.ipynb was shut down after \d+ s idle holding 2\.00 GiB\.")
    )
    culled.wait_for(timeout=30_000)
    assert "The notebook is unchanged." in culled.inner_text()
    screenshot(page, "notification-after-cull")
    assert culling.api("GET", "api/kernels") == []
