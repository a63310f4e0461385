"""``jupyter gpu grafana``: where the Prometheus recording rules and the Grafana dashboard are.

They are installed inside the package, where an operator would not look; this prints their
paths and what to do with each.
"""

from __future__ import annotations

import argparse

from ..monitoring import DASHBOARD, RULES
from .common import EXIT_OK, print_json


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "grafana",
        help="print where the Prometheus rules and the Grafana dashboard are",
        description="Print the paths of the Prometheus recording rules (jupyter_gpu's series under "
        "NVIDIA DCGM exporter's names, for dashboard 12239) and of jupyter_gpu's Grafana dashboard "
        "(memory by notebook, kernel and user; allocator fragmentation per kernel).",
    )
    p.add_argument("--json", action="store_true", help="print JSON: {rules, dashboard}")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.json:
        print_json({"rules": str(RULES), "dashboard": str(DASHBOARD)})
        return EXIT_OK
    print(f"Prometheus recording rules: {RULES}")
    print("  add the path to rule_files in prometheus.yml: DCGM-named series for dashboard 12239")
    print(f"Grafana dashboard: {DASHBOARD}")
    print("  import it (Dashboards > New > Import > Upload JSON file) and pick your Prometheus data source")
    return EXIT_OK
