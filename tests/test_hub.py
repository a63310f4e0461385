"""The instructor's view against a real JupyterHub (see tests/support/hub.py): who sees what, and the
two actions, checked where a user would notice them (the student's server, the Hub)."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest
import requests
from support.hub import INSTRUCTOR, RealHub, page_xsrf, service_json

SERVICE = "services/jupyter-gpu/"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    hub = RealHub(tmp_path_factory.mktemp("hub"))
    try:
        hub.start_servers("alice", "bob", "carol")
        hub.kernels = {
            ("alice", "train.ipynb"): hub.start_kernel("alice", "train.ipynb"),
            ("alice", "eval.ipynb"): hub.start_kernel("alice", "eval.ipynb"),
            ("bob", "lab1/cnn.ipynb"): hub.start_kernel("bob", "lab1/cnn.ipynb"),
        }
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def instructor(hub):
    session = hub.login(INSTRUCTOR)
    page = session.get(f"{hub.url}/{SERVICE}", timeout=30)
    assert page.status_code == 200, page.text[-2000:]
    session.xsrf = page_xsrf(page.text)
    session.page = page.text
    return session


def post(session, hub, action, body, *, xsrf=True):
    headers = {"X-XSRFToken": session.xsrf} if xsrf else {}
    return session.post(f"{hub.url}/{SERVICE}api/{action}", json=body, headers=headers, timeout=30)


def test_the_instructor_sees_every_students_kernels_and_notebooks(hub, instructor):
    view = service_json(instructor, hub)
    seen = {(k["user"], k["notebook"]): k["kernel_id"] for k in view["kernels"]}
    assert seen == hub.kernels
    states = {s["user"]: (s["state"], s["kernels"]) for s in view["servers"]}
    assert states == {"alice": ("ok", 2), "bob": ("ok", 1), "carol": ("ok", 0)}
    # the simulated node's two GPUs, each listed once though three servers report them
    assert [g["index"] for g in view["gpus"]] == [0, 1]
    assert all(g["users"] == ["alice", "bob", "carol"] for g in view["gpus"])


def _service_token(hub) -> str:
    """The service's own token, read from its process's environment (the Hub generates it)."""
    service = next(
        p
        for p in psutil.Process(hub.process.pid).children(recursive=True)
        if "jupyter_gpu.hub" in p.cmdline()
    )
    return service.environ()["JUPYTERHUB_API_TOKEN"]


def test_no_token_reaches_the_browser(hub, instructor):
    text = instructor.page + json.dumps(service_json(instructor, hub))
    assert _service_token(hub) not in text and hub.admin_token not in text
    assert "token" not in json.dumps(service_json(instructor, hub)).lower()


def test_a_student_gets_403_from_the_page_and_the_api(hub):
    student = hub.login("alice")
    page = student.get(f"{hub.url}/{SERVICE}", timeout=30)
    assert page.status_code == 403
    assert "train.ipynb" not in page.text
    assert student.get(f"{hub.url}/{SERVICE}api/kernels", timeout=30).status_code == 403
    # ... and with a token of her own instead of the browser's cookie
    token = hub.admin("POST", "hub/api/users/alice/tokens", json={"expires_in": 300}).json()["token"]
    reply = requests.get(
        f"{hub.url}/{SERVICE}api/kernels", headers={"Authorization": f"token {token}"}, timeout=30
    )
    assert reply.status_code == 403 and "train.ipynb" not in reply.text


def test_an_action_without_the_pages_xsrf_token_is_refused(hub, instructor):
    kernel = hub.kernels[("alice", "eval.ipynb")]
    reply = post(instructor, hub, "shutdown-kernel", {"user": "alice", "kernel_id": kernel}, xsrf=False)
    assert reply.status_code == 403
    assert kernel in hub.kernel_ids("alice")


def test_a_kernel_shut_down_from_the_page_is_gone_from_the_students_server(hub, instructor):
    kernel = hub.kernels[("alice", "train.ipynb")]
    reply = post(instructor, hub, "shutdown-kernel", {"user": "alice", "server": "", "kernel_id": kernel})
    assert reply.status_code == 200, reply.text
    assert kernel not in hub.kernel_ids("alice")
    assert hub.kernels[("alice", "eval.ipynb")] in hub.kernel_ids("alice")  # only that one
    assert kernel not in {k["kernel_id"] for k in service_json(instructor, hub)["kernels"]}
    # logged with who did it; the token minted for it was scoped to alice's server and is revoked
    hub.wait_for(
        "the action in the log", lambda: f"{INSTRUCTOR} shut down kernel {kernel} of alice" in hub.log()
    )
    tokens = hub.admin("GET", "hub/api/users/alice/tokens").json()["api_tokens"]
    assert not [t for t in tokens if "shuts down" in t["note"]]
    # what the service reads her server with: a token of hers for that server alone
    (reading,) = [t for t in tokens if t["note"].startswith("jupyter-gpu: reads")]
    assert "access:servers!server=alice/" in reading["scopes"]
    assert [s for s in reading["scopes"] if not s.endswith(("!user=alice", "!server=alice/"))] == []


def test_a_kernel_that_is_not_there_is_a_404_not_a_success(hub, instructor):
    reply = post(instructor, hub, "shutdown-kernel", {"user": "alice", "kernel_id": "no-such-kernel"})
    assert reply.status_code == 404
    assert "no kernel" in reply.json()["message"]


def test_a_stopped_server_is_stopped_in_the_hub(hub, instructor):
    reply = post(instructor, hub, "stop-server", {"user": "bob", "server": ""})
    assert reply.status_code == 200, reply.text
    hub.wait_for("bob's server to stop", lambda: "" not in hub.user_model("bob")["servers"], timeout=30)
    assert f"{INSTRUCTOR} stopped bob's server" in hub.log()
    assert "bob" not in {s["user"] for s in service_json(instructor, hub)["servers"]}


def test_an_unreachable_server_shows_as_not_answering(hub, instructor):
    pid = hub.server_pid("carol")
    os.kill(pid, signal.SIGSTOP)  # hung: the proxy connects, nothing answers
    try:
        view = service_json(instructor, hub)
    finally:
        os.kill(pid, signal.SIGCONT)
    carol = next(s for s in view["servers"] if s["user"] == "carol")
    assert carol["state"] == "not_answering" and carol["kernels"] is None
    assert view["servers"][0] == carol  # problems first
    alice = next(s for s in view["servers"] if s["user"] == "alice")
    assert alice["state"] == "ok"
