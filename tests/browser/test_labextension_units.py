"""Runs the frontend's own unit tests (data shaping in labextension/src: formatting, history →
chart paths, busiest GPU, who holds memory) so that `python -m pytest` covers them too."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from support.browser import REPO

LABEXTENSION = REPO / "labextension"


def test_typescript_unit_tests_pass():
    jlpm = shutil.which("jlpm")
    if jlpm is None or not (LABEXTENSION / "node_modules" / "typescript").is_dir():
        why = "the labextension's node_modules are not installed (pip install -e . or cd labextension && jlpm install)"
        if os.environ.get("JUPYTER_GPU_REQUIRE_BROWSER") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    result = subprocess.run([jlpm, "test"], cwd=LABEXTENSION, capture_output=True, text=True, timeout=300)
    summary = [line for line in result.stdout.splitlines() if line.startswith("# ")]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in summary, summary
