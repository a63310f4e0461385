"""Sphinx configuration: MyST pages in the PyData theme, as jupyter_server and JupyterLab have.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (.ci/run does, after the
tests). Reference pages are generated from the code by the extension in ``_ext/``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(DOCS / "_ext"), str(ROOT)]  # the extension, and the package of this checkout

project = "jupyter_gpu"
author = "jupyter_gpu contributors"
copyright = "jupyter_gpu contributors"  # noqa: A001 -- Sphinx's name for it
# the package's version is the frontend's (pyproject.toml: hatch's nodejs version source)
release = version = json.loads((ROOT / "labextension" / "package.json").read_text())["version"]

extensions = [
    "myst_parser",
    "jupyter_gpu_docs",  # the generated reference pages (docs/_ext)
    # The REST API page renders jupyter_gpu/server/openapi.yaml with sphinxcontrib-openapi, the
    # renderer jupyter_server's docs use for its own REST API.
    "sphinxcontrib.openapi",
]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3  # links to a heading of another page, checked like every internal link

exclude_patterns = ["_build"]
# Internal links are checked by the build itself: with -W a page, heading anchor or label that
# does not exist fails it (myst.xref_missing, ref.ref). External ones are not (CI has no internet).
nitpicky = True
smartquotes = False  # "--url" in the parsers' help stays two hyphens, not an en dash

html_theme = "pydata_sphinx_theme"
html_title = "jupyter_gpu"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_static_path: list[str] = []
