"""jupyter_server's ``/metrics`` read as Prometheus reads it: families by name, and the series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def parse(text: str) -> dict[str, tuple[str, list]]:
    """name -> (type, samples) as Prometheus reads the exposition."""
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def series(text: str) -> list[str]:
    """Each sample's name and labels, without its value (a series listed twice shows here twice)."""
    return [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
