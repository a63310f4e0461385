"""``jupyter gpu`` as users start it: the `jupyter gpu` subcommand, its help, and bad arguments
that exit 2 with one line, never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from support.cli import ENV, cli

# -- arguments and entry points -------------------------------------------------------------------


def test_jupyter_finds_the_subcommand(tmp_path):
    """`jupyter gpu` runs the `jupyter-gpu` script pip installs (CI installs the package);
    from a bare checkout, a stand-in for that script on PATH."""
    env = ENV
    if shutil.which("jupyter-gpu") is None:
        shim = tmp_path / "jupyter-gpu"
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m jupyter_gpu "$@"\n')
        shim.chmod(0o755)
        env = dict(ENV, PATH=f"{tmp_path}{os.pathsep}{ENV['PATH']}")
    done = subprocess.run(["jupyter", "gpu", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "{status,pick,doctor,warmup,preflight,grafana}" in done.stdout and "3 no usable GPU" in done.stdout


def test_help_names_the_magics_as_typed_in_a_notebook():
    """argparse %-formats help lines but not descriptions: '%%' must appear only where it is formatted."""
    doctor, top = cli("doctor", "--help").stdout, cli("--help").stdout
    assert "The checklist of %gpu_doctor:" in doctor
    assert "run all of %gpu_warmup's steps" in top
    assert "%%" not in doctor + top


@pytest.mark.parametrize(
    "args, message",
    [
        ((), None),
        (("status", "--url", "localhost:8888"), "give the server's address"),
        (("status", "--token", "abc"), "--token goes with --url"),
        (("status", "--url", "http://127.0.0.1:1/", "--no-server"), "contradict"),
        (("preflight", "--iters", "0"), "--iters must be at least 1"),
        (("preflight", "--size-mib", "lots"), "invalid int value"),
        (("teleport",), "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    done = cli(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    if message:
        assert message in done.stderr.strip().splitlines()[-1]
