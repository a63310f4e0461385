"""%gpu_doctor on the Jupyter servers it can reach: each answer (no GPU routes, a refused token,
no connection, no server) as a verdict, and real servers asked over HTTP with their token."""

from __future__ import annotations

import dataclasses
import http.server
import socket
import threading

import pytest
from support.doctor_facts import check, healthy

from jupyter_gpu.client import Server
from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.servers import ServerProbe, probe_servers


@pytest.mark.parametrize(
    ("servers", "status", "words"),
    [
        ([ServerProbe("http://h/api/gpu/devices", status=404)], Status.WARN, "no GPU routes"),
        ([ServerProbe("http://h/api/gpu/devices", status=403)], Status.WARN, "refused this kernel's token"),
        (
            [ServerProbe("http://h/api/gpu/devices", error="Connection refused")],
            Status.WARN,
            "Connection refused",
        ),
        ([], Status.INFO, "no running Jupyter server"),
    ],
)
def test_server_extension_reachability(servers, status, words):
    facts = healthy()
    facts.servers = servers
    got = check(evaluate(facts), "server")
    assert got.status is status and words in got.summary


class _Api(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- the name http.server calls
        if self.path != "/api/gpu/devices":
            self.send_error(404)
        elif self.headers.get("Authorization") != "token secret":
            self.send_error(403)
        else:
            body = b'{"available": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_servers_are_asked_over_http_with_their_token(api_server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/"
    probes = probe_servers(
        lambda: [
            Server(api_server, "secret"),
            Server(api_server, "wrong"),
            Server(api_server + "lab/", "secret"),
            Server(dead, "secret"),
        ]
    )
    assert [p.status for p in probes] == [200, 403, 404, None]
    assert probes[0].url == api_server + "api/gpu/devices"
    assert probes[3].error.startswith(f"cannot reach {dead}: ")
    assert (
        check(evaluate(dataclasses.replace(healthy(), servers=probes[3:])), "server").summary
        == probes[3].error
    )
