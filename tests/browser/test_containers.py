"""Inside containers, as the user sees it (issue #27): a kernel that dies without being asked to
reaches its owner as a JupyterLab notification that says why, instead of only "The kernel appears
to have died"; and the panel states the container's memory limit beside the GPUs."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from support.browser import (
    LabServer,
    open_gpu_panel,
    open_lab,
    open_lab_listening,
    screenshot,
)
from support.memory_cgroup import entering, memory_cgroup

pytestmark = pytest.mark.browser


def test_the_owner_is_told_why_a_kernel_died(page, lab_factory):
    lab = lab_factory(base_url="/hub/user/died/")
    open_lab_listening(page, lab)
    kernel_id = lab.start_notebook_kernel("course/week3/train.ipynb")
    deadline = time.monotonic() + 30
    while not (
        pid := next(
            (k["pid"] for k in lab.api("GET", "api/gpu/kernels")["kernels"] if k["id"] == kernel_id), None
        )
    ):
        assert time.monotonic() < deadline, "the kernel never had a pid"
        page.wait_for_timeout(100)
    os.kill(pid, signal.SIGKILL)
    told = page.get_by_text("course/week3/train.ipynb: the kernel was ended by SIGKILL")
    told.wait_for(timeout=30_000)
    screenshot(page, "notification-kernel-died")
    (died,) = lab.api("GET", "api/gpu/exits")["exits"]
    assert died["kernel_id"] == kernel_id and died["cause"] == "signal"


def test_the_panel_states_the_containers_memory_limit(page, tmp_path):
    with memory_cgroup(3 * 2**29) as (procs, _version):
        lab = LabServer(tmp_path, prefix=entering(procs))
        try:
            open_lab(page, lab)
            open_gpu_panel(page)
            host = page.locator('.jp-gpu-host[data-field="host"]')
            host.wait_for(timeout=30_000)
            assert re.fullmatch(
                r"[\d.]+ / 1\.50 GiB of the container's memory limit/dev/shm: .+ free of .+",
                host.inner_text().replace("\n", ""),
            ), host.inner_text()
            screenshot(page, "panel-container-limit")
        finally:
            lab.stop()
