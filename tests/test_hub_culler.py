"""The Hub culls idle GPU servers (issue #28, ``python -m jupyter_gpu.hub --cull-idle-servers``),
against a real JupyterHub: a student's server whose kernel sits idle is stopped while her tab
polls the GPU panel, after her JupyterLab tabs were told when and why; one whose kernel runs a
long cell is kept, and told nothing, as is one whose kernel is idle while she works in a terminal;
the instructor's page says who was stopped and why."""

from __future__ import annotations

import threading
import time

import pytest
from jupyter_client.blocking import BlockingKernelClient
from support.hub import INSTRUCTOR, RealHub, TerminalInUse, page_xsrf, service_json

from jupyter_gpu.server.notices import EVENT_ID as SERVER_STOP

IDLE_AFTER = 10
WARN_BEFORE = 5


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub = RealHub(
        tmp_path_factory.mktemp("hub"),
        service_args=("--cull-idle-servers", str(IDLE_AFTER), "--cull-warn-before", str(WARN_BEFORE)),
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
    hub.start_servers("alice", "bob", "carol")
    # their JupyterLab tabs' event streams
    tabs = {user: hub.events(user) for user in ("alice", "bob", "carol")}
    hub.start_kernel("alice", "forgotten.ipynb")
    hub.start_kernel("carol", "idle.ipynb")
    terminal = TerminalInUse(hub, "carol")  # her kernel sits idle while she works in a terminal
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
        (notice,) = hub.wait_for(
            "alice's tabs to be told of the stop",
            lambda: tabs["alice"].of(SERVER_STOP),
            timeout=IDLE_AFTER + 30,
        )
        assert hub.user_model("alice")["servers"][""]["ready"]  # told before, not after
        hub.wait_for(
            "alice's idle server to be stopped",
            lambda: not hub.user_model("alice")["servers"],
            timeout=IDLE_AFTER + 40,
        )
        stopped = time.monotonic()
        assert stopped - started >= IDLE_AFTER - 1  # not before its time
        # the notice did not keep the server, nor hurry the stop: it came warn_before after it
        assert stopped - notice["received"] >= WARN_BEFORE - 1
        assert hub.user_model("bob")["servers"][""]["ready"]  # the busy kernel's server stays
        assert hub.user_model("carol")["servers"][""]["ready"]  # and the terminal's
    finally:
        polling.set()
        client.stop_channels()
        terminal.close()
        for stream in tabs.values():
            stream.close()
    assert notice["by"] == "the Hub's idle culler" and 0 < notice["stop_in_seconds"] <= WARN_BEFORE
    assert notice["reason"].startswith("every kernel idle for at least")
    assert notice["message"] == (
        f"Your server will be stopped in {notice['stop_in_seconds']:.0f} s by the Hub's idle culler: "
        f"{notice['reason']}. Run a cell to keep it."
    )
    assert tabs["bob"].of(SERVER_STOP) == []  # busy: nothing to warn of
    assert tabs["carol"].of(SERVER_STOP) == []  # in use in a terminal: nothing either
    assert len(tabs["alice"].of(SERVER_STOP)) == 1  # once
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
    assert "told alice's tabs: the server stops in" in hub.log()
