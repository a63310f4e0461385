"""The report as text (terminals, logs) and HTML (notebooks). JSON is ``Report.to_json``."""
from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from .checks import Status

if TYPE_CHECKING:
    from .report import Report

_LABEL = {Status.OK: "OK", Status.INFO: "INFO", Status.WARN: "WARN", Status.FAIL: "FAIL"}
_COLOUR = {Status.OK: "#2e7d32", Status.INFO: "#546e7a", Status.WARN: "#b26a00", Status.FAIL: "#c62828"}


def render_text(report: Report) -> str:
    lines = [report.verdict, ""]
    for c in report.checks:
        lines.append(f"[{_LABEL[c.status]:>4}] {c.title}: {c.summary}")
        if c.fix:
            lines.append(f"       fix: {c.fix}")
    return "\n".join(lines)


def render_html(report: Report) -> str:
    rows = []
    for c in report.checks:
        badge = (f'<span style="color:#fff;background:{_COLOUR[c.status]};border-radius:3px;'
                 f'padding:0 4px;font-size:85%">{_LABEL[c.status]}</span>')
        fix = f'<div style="margin-top:2px"><b>Fix:</b> {escape(c.fix)}</div>' if c.fix else ""
        detail = (f'<details><summary>details</summary><pre style="white-space:pre-wrap">{escape(c.detail)}'
                  "</pre></details>" if c.detail else "")
        rows.append(
            f'<tr><td style="vertical-align:top">{badge}</td>'
            f'<td style="vertical-align:top;text-align:left;white-space:nowrap">{escape(c.title)}</td>'
            f'<td style="text-align:left">{escape(c.summary)}{fix}{detail}</td></tr>'
        )
    colour = _COLOUR[Status.OK if report.cuda_ready and report.primary is None else report.status]
    return (
        f'<div class="jupyter-gpu-doctor"><p style="font-weight:bold;color:{colour}">{escape(report.verdict)}</p>'
        f'<table>{"".join(rows)}</table></div>'
    )
