"""The Prometheus series of ``/metrics``, read from jupyter_gpu's collector: every family it can
produce, with its type, help and labels, whatever GPUs there are (none are needed)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from .nodes import table

SUFFIX = {"counter": "_total", "info": "_info"}  # what the exposition adds to a family's name


@dataclass(frozen=True)
class Series:
    name: str
    type: str
    help: str
    labels: tuple[str, ...]


def _monitor() -> Any:
    """A running server's monitor with every part present and nothing in it: the collector
    then yields each family it knows, without samples. A part the collector starts to read
    and this lacks fails the docs build loudly instead of leaving series out."""
    status = SimpleNamespace(available=True, devices=[], system={})
    return SimpleNamespace(
        sampler=SimpleNamespace(status=status, latest=lambda: SimpleNamespace(gpus=[])),
        simulated=False,
        exits=SimpleNamespace(xid_counts=dict),
        kernels=SimpleNamespace(last={"kernels": [], "unattributed": []}),
        metrics_kernel_labels="both",
    )


def series() -> list[Series]:
    from jupyter_gpu.server.metrics import GPUCollector

    collector = GPUCollector()
    collector.monitor = _monitor()
    # _families, not collect(): collect() leaves out the families without samples
    return [
        Series(
            f.name + SUFFIX.get(f.type, ""),
            f.type,
            f.documentation,
            tuple(getattr(f, "_labelnames", ())),  # prometheus_client keeps a family's labels here
        )
        for f in collector._families()
    ]


class MetricsDirective(SphinxDirective):
    """``jupyter-gpu-metrics``: a table of every series."""

    def run(self) -> list[nodes.Node]:
        rows = [
            (f"`{s.name}`", s.type, ", ".join(f"`{label}`" for label in s.labels), s.help) for s in series()
        ]
        return [table(("series", "type", "labels", "what"), rows, (4, 1, 3, 5))]
