"""Build hook: a package built from source has its JupyterLab frontend, or the build says why not.

Runs before hatch-jupyter-builder, which builds ``labextension/`` with Node.js. Without Node.js
that builder fails for wheels and, for editable installs, only warns: the install then
"succeeds" with a server extension and no GPU panel. Here a missing or too old Node.js either
falls back to a bundle already built into ``jupyter_gpu/labextension`` (said so) or stops the
build with the fix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

NODE_MIN = 18
BUNDLE = Path("jupyter_gpu") / "labextension" / "static" / "style.js"
SKIP_ENV = ("HATCH_JUPYTER_BUILDER_SKIP_NPM", "SKIP_JUPYTER_BUILDER")  # the builder's own opt-outs


class FrontendMissing(Exception):
    """The frontend can be neither built nor taken prebuilt."""


def node_major(node: str | None) -> int | None:
    """The major version of the Node.js at ``node`` (None: not there, or it does not run)."""
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    match = re.match(r"v(\d+)\.", out.strip())
    return int(match.group(1)) if match else None


def frontend_plan(root: Path, node_version: int | None, env: Mapping[str, str]) -> tuple[str, str]:
    """``(plan, sentence)``: plan is "build" (Node.js builds it), "prebuilt" (the bundle in
    jupyter_gpu/labextension is used as it is) or "skip" (the builder was told to skip it).

    Raises FrontendMissing, with what to do, when there is neither a usable Node.js nor a bundle.
    """
    skip = [name for name in SKIP_ENV if env.get(name)]
    if skip:
        return (
            "skip",
            f"{skip[0]} is set: the JupyterLab frontend is not built (no GPU panel unless it is built already)",
        )
    if node_version is not None and node_version >= NODE_MIN:
        return (
            "build",
            f"Node.js {node_version} builds the JupyterLab frontend (unless a current build is there)",
        )
    found = "not found on PATH" if node_version is None else f"the node on PATH is version {node_version}"
    if (root / BUNDLE).is_file():
        return "prebuilt", (
            f"Node.js >= {NODE_MIN} is needed to build the JupyterLab frontend ({found}): "
            f"using the one already built in {BUNDLE.parent.parent}, not rebuilt from labextension/"
        )
    raise FrontendMissing(
        f"jupyter_gpu's JupyterLab frontend (the GPU panel and status bar) is built from labextension/ "
        f"with Node.js >= {NODE_MIN} ({found}), and no built copy is in {BUNDLE.parent.parent}. Install "
        "Node.js (https://nodejs.org/, `conda install -c conda-forge nodejs` or `apt-get install nodejs`) "
        "and install again, or install a released wheel, which has the frontend built in. To install "
        "the Python side alone on purpose, set HATCH_JUPYTER_BUILDER_SKIP_NPM=1."
    )


class FrontendCheck(BuildHookInterface):
    """Decides, before hatch-jupyter-builder runs, whether the frontend is built or taken prebuilt."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        plan, sentence = frontend_plan(Path(self.root), node_major(shutil.which("node")), os.environ)
        self.app.display_info(f"jupyter_gpu: {sentence}")
        if plan == "prebuilt":
            os.environ["HATCH_JUPYTER_BUILDER_SKIP_NPM"] = "1"  # hatch-jupyter-builder: do not call npm
