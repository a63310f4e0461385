"""Files for operators: Prometheus recording rules that give jupyter_gpu's series NVIDIA DCGM
exporter's names and units (so DCGM dashboards such as Grafana's 12239 work unchanged), and a
Grafana dashboard of what DCGM cannot show (memory by notebook, kernel and user; the PyTorch
allocator per kernel). ``jupyter gpu grafana`` prints where they are installed."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
RULES = HERE / "prometheus-rules.yml"
DASHBOARD = HERE / "grafana-dashboard.json"
