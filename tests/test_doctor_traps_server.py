"""Issue #21: the Jupyter server the kernel belongs to, started for real with each unsafe
setting (no token, any origin, no XSRF check, every interface without TLS, root) and asked by the
doctor as a stranger would; each with the cause, the fix and the exit code the user sees."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.doctor_cli import ENV, doctor, row
from support.waiting import wait_until

CONFIG_FIX = "in `jupyter_server_config.py`"
STRANGER = "/api/status?jupyter-gpu-doctor=checks-that-strangers-are-refused"


def start_server(runtime: Path, *args: str) -> subprocess.Popen:
    """A real Jupyter server; its log goes to ``runtime/server.log``."""
    with (runtime / "server.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--allow-root", "--no-browser", "--port=0", *args],
            env={**ENV, "JUPYTER_RUNTIME_DIR": str(runtime)},
            cwd=runtime,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    wait_until("the server's jpserver file", lambda: list(runtime.glob("jpserver-*.json")), timeout=60)
    return server


# (server arguments, {check: (status, words of the cause)}, words of the fix)
SERVERS = [
    (
        (),
        {"server_auth": ("ok", "asks for a token"), "server_origin": ("ok", ""), "server_xsrf": ("ok", "")},
        None,
    ),
    (
        ("--IdentityProvider.token=",),
        {"server_auth": ("fail", "has no token and no password: every user of this machine can run code")},
        "`c.IdentityProvider.token = '<a long random string>'`",
    ),
    (
        ("--ServerApp.allow_origin=*",),
        {"server_origin": ("warn", "lets '*' call it from a browser")},
        "`c.ServerApp.allow_origin = ''`",
    ),
    (
        ("--IdentityProvider.token=", "--ServerApp.allow_origin=*"),
        {"server_origin": ("fail", "and with no token it can run code")},
        "`c.ServerApp.allow_origin = ''`",
    ),
    (
        ("--ServerApp.disable_check_xsrf=True",),
        {"server_xsrf": ("warn", "accepts a POST without an XSRF token")},
        "`c.ServerApp.disable_check_xsrf = False`",
    ),
    (
        ("--ServerApp.ip=0.0.0.0",),
        {"server_tls": ("warn", "listens on 0.0.0.0 without TLS")},
        "`c.ServerApp.ip = '127.0.0.1'`",
    ),
]


@pytest.mark.parametrize(
    ("args", "expected", "fix"), SERVERS, ids=[" ".join(a) or "default" for a, *_ in SERVERS]
)
def test_the_jupyter_server_is_asked_as_a_stranger_would(args, expected, fix):
    with tempfile.TemporaryDirectory() as runtime:
        server = start_server(Path(runtime), *args)
        try:
            report, code = doctor(env={"JUPYTER_RUNTIME_DIR": runtime})
        finally:
            server.terminate()
            server.wait(30)
        log = (Path(runtime) / "server.log").read_text()
    for id_, (status, cause) in expected.items():
        got = row(report, id_)
        assert got["status"] == status and cause in got["summary"], got
        if status != "ok":
            assert fix in got["fix"] and CONFIG_FIX in got["fix"], got
    if any(status == "fail" for status, _ in expected.values()):
        assert code == 1
    # The stranger's requests a safe server refuses are warnings in its log; each says what it was.
    refused = re.findall(r"\b40[35] (GET|POST|OPTIONS) (\S+)", log)
    assert all(path == STRANGER for _, path in refused), refused
    if not args:  # the GET without the token, the POST without the XSRF token
        assert {method for method, _ in refused} == {"GET", "POST"}, log
    if os.geteuid() == 0:  # this machine: root, so the server ran with --allow-root
        assert row(report, "root")["status"] == "warn"
        assert "`c.ServerApp.allow_root = False`" in row(report, "root")["fix"]
