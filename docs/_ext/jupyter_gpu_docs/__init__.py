"""Sphinx extension for jupyter_gpu's reference pages, generated from the code: the magics and
command lines from their argparse parsers, the configuration from the traitlets, the Prometheus
series from the collector."""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx

from .cli import CommandDirective
from .config import ConfigDirective
from .magics import MagicsDirective
from .metrics import MetricsDirective


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("jupyter-gpu-magics", MagicsDirective)
    app.add_directive("jupyter-gpu-command", CommandDirective)
    app.add_directive("jupyter-gpu-config", ConfigDirective)
    app.add_directive("jupyter-gpu-metrics", MetricsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
