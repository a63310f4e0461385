"""A kernel that dies without being asked to reaches its owner as a JupyterLab notification that
says why (issue #27), instead of only "The kernel appears to have died"."""

from __future__ import annotations

import os
import signal
import time

import pytest
from support.browser import open_lab, run_page_until, screenshot

pytestmark = pytest.mark.browser


def test_the_owner_is_told_why_a_kernel_died(page, lab_factory):
    lab = lab_factory(base_url="/hub/user/died/")
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    open_lab(page, lab)
    run_page_until(
        page,
        "JupyterLab's event stream",
        lambda: any("api/events/subscribe" in u for u in sockets),
        event="websocket",
    )
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
