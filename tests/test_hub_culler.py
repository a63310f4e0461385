"""The Hub culls idle GPU servers (issue #28, ``python -m jupyter_gpu.hub --cull-idle-servers``),
against a real JupyterHub: a student's server whose kernel sits idle is stopped while her tab
polls the GPU panel; one whose kernel runs a long cell is kept; the instructor's page says who
was stopped and why."""

from __future__ import annotations

import threading
import time

import pytest
from jupyter_client.blocking import BlockingKernelClient
from support.hub import INSTRUCTOR, RealHub, page_xsrf, service_json

IDLE_AFTER = 10


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub = RealHub(
        tmp_path_factory.mktemp("hub"),
        service_args=("--cull-idle-servers", str(IDLE_AFTER), "--cull-warn-before", "5"),
    )
    yield hub
    hub.stop()


def busy(hub: RealHub, user: str, kernel_id: str) -> BlockingKernelClient:
    """Start a long cell in the user's kernel, as her notebook would (through its connection file)."""
    (connection,) = (hub.tmp / "home" / user).rglob(f"kernel-{kernel_id}.json")
    client = BlockingKernelClient(connection_file=str(connection))
    client.load_connection_file()
    client.start_channels(hb=False)  # no kernel manager here: the heartbeat would say it died
    client.wait_for_ready(timeout=60)
    client.execute("import time; time.sleep(600)")
    hub.wait_for(
        f"{user}'s kernel to be busy",
        lambda: any(
            k["id"] == kernel_id and k["execution_state"] == "busy"
            for k in hub.admin("GET", f"user/{user}/api/kernels").json()
        ),
    )
    return client


def test_an_idle_server_is_stopped_while_its_tab_polls_and_a_busy_one_is_kept(hub):
    hub.start_servers("alice", "bob")
    hub.start_kernel("alice", "forgotten.ipynb")
    client = busy(hub, "bob", hub.start_kernel("bob", "training.ipynb"))
    polling = threading.Event()

    def tab() -> None:  # alice's forgotten tab: the GPU panel's polls, and JupyterLab's own
        while not polling.is_set():
            for route in ("api/gpu/telemetry", "api/gpu/kernels", "api/kernels"):
                hub.admin("GET", f"user/alice/{route}")
            time.sleep(0.5)

    poller = threading.Thread(target=tab, daemon=True)
    poller.start()
    try:
        started = time.monotonic()
        hub.wait_for(
            "alice's idle server to be stopped",
            lambda: not hub.user_model("alice")["servers"],
            timeout=IDLE_AFTER + 40,
        )
        assert time.monotonic() - started >= IDLE_AFTER - 1  # not before its time
        assert hub.user_model("bob")["servers"][""]["ready"]  # the busy kernel's server stays
    finally:
        polling.set()
        client.stop_channels()
    instructor = hub.login(INSTRUCTOR)
    page = instructor.get(f"{hub.url}/services/jupyter-gpu/", timeout=30)  # the Hub's OAuth, once
    assert page.status_code == 200 and 'id="culled"' in page.text
    instructor.xsrf = page_xsrf(page.text)
    culled = service_json(instructor, hub)["culled"]
    stopped = [c for c in culled if c["action"] == "stop"]
    assert [c["user"] for c in stopped] == ["alice"]
    assert stopped[0]["message"].startswith("alice's server stopped: every kernel idle for at least")
    warned = [c for c in culled if c["action"] == "warn"]
    assert [c["user"] for c in warned] == ["alice"] and "will be stopped in" in warned[0]["message"]
    assert "stopped: every kernel idle" in hub.log()  # who and why, in the service's log
