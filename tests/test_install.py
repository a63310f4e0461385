"""`pip install` alone enables both halves, the server extension and the prebuilt frontend; a build
from source without Node.js stops with the fix, or uses a frontend built already and says so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


def jupyter(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "jupyter", *args], capture_output=True, text=True, timeout=120
    )
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)  # drop colour codes


def test_server_extension_is_enabled_and_loads():
    text = jupyter("server", "extension", "list")
    assert re.search(r"jupyter_gpu enabled", text), text
    assert re.search(r"jupyter_gpu \S+ OK", text), text


def test_prebuilt_labextension_is_enabled():
    text = jupyter("labextension", "list")
    assert re.search(r"jupyter-gpu v\S+ enabled\s+OK \(python, jupyter_gpu\)", text), text


# -- building from source -----------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
BUILT = "static/style.js"  # under jupyter_gpu/labextension once the frontend is built
NO_NODE = "not found on PATH"
OLD_NODE = "the node on PATH is version 16"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """What a build reads from this checkout, without any built frontend."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "hatch_build.py", "README.md", "LICENSE", "install.json"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "jupyter-config", src / "jupyter-config")
    shutil.copytree(
        REPO / "jupyter_gpu",
        src / "jupyter_gpu",
        ignore=shutil.ignore_patterns("__pycache__", "labextension"),
    )
    (src / "labextension").mkdir()
    shutil.copy(REPO / "labextension" / "package.json", src / "labextension" / "package.json")
    return src


def build(source: Path, kind: str, node: str | None) -> subprocess.CompletedProcess[str]:
    """Build a wheel or editable wheel of ``source`` with hatchling, as pip would, where PATH
    holds no Node.js (``node=None``) or one that reports version ``node``."""
    path = source.parent / "bin"
    path.mkdir(exist_ok=True)
    if node is not None:
        fake = path / "node"
        fake.write_text(f"#!/bin/sh\necho v{node}\n")
        fake.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HATCH_JUPYTER_BUILDER_SKIP_NPM", "SKIP_JUPYTER_BUILDER")
    }
    env["PATH"] = str(path)
    code = f"from hatchling.build import build_{kind}; print(build_{kind}({str(source.parent / 'dist')!r}))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=source, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("kind", ["wheel", "editable"])
@pytest.mark.parametrize("node, why", [(None, NO_NODE), ("16.20.2", OLD_NODE)])
def test_building_without_node_fails_and_says_what_to_do(
    source: Path, kind: str, node: str | None, why: str
) -> None:
    result = build(source, kind, node)
    assert result.returncode != 0
    assert (
        f"FrontendMissing: jupyter_gpu's JupyterLab frontend (the GPU panel and status bar) is built "
        f"from labextension/ with Node.js >= 18 ({why})"
    ) in result.stderr, result.stderr
    assert "Install Node.js" in result.stderr and "install a released wheel" in result.stderr
    assert not (source.parent / "dist").exists() or not any((source.parent / "dist").iterdir())


def test_building_without_node_uses_a_prebuilt_frontend_and_says_so(source: Path) -> None:
    bundle = source / "jupyter_gpu" / "labextension"
    (bundle / "static").mkdir(parents=True)
    (bundle / BUILT).write_text("/* built */")
    (bundle / "package.json").write_text('{"name": "jupyter-gpu"}')
    result = build(source, "wheel", None)
    assert result.returncode == 0, result.stderr
    assert (
        f"jupyter_gpu: Node.js >= 18 is needed to build the JupyterLab frontend ({NO_NODE}): using the "
        "one already built in jupyter_gpu/labextension"
    ) in result.stdout + result.stderr
    wheel = source.parent / "dist" / result.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert any(n.endswith(f"share/jupyter/labextensions/jupyter-gpu/{BUILT}") for n in names), names
        # the REST API's description ships with the schemas its $refs name
        api = {"jupyter_gpu/server/openapi.yaml", "jupyter_gpu/server/schema/devices.schema.json"}
        assert api <= set(names), names
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: BSD-3-Clause" in metadata and "License-File: LICENSE" in metadata
    assert "License ::" not in metadata  # PEP 639: the expression, not a classifier
