"""The one report for every surface: a heading, sections of rows, notes; as text (terminals,
logs, ``print``) and as HTML (notebooks). The doctor's checklist, the warm-up's timings and
``%gpu_mem`` are all drawn here, so they look alike and every string is escaped the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape

# A checklist row's status: "ok", "info", "warn" or "fail" (the doctor's Status values).
_LABEL = {"ok": "OK", "info": "INFO", "warn": "WARN", "fail": "FAIL"}
_COLOUR = {"ok": "#2e7d32", "info": "#546e7a", "warn": "#b26a00", "fail": "#c62828"}
_LEFT = "text-align:left"


@dataclass
class Row:
    """``label``, a right-aligned ``value`` and a ``note``. A checklist row has a ``status``
    badge instead of a value and may carry a ``fix`` and a ``detail`` (folded away in HTML)."""

    label: str
    value: str = ""
    note: str = ""
    status: str | None = None
    fix: str | None = None
    detail: str | None = None
    strong: bool = False  # a total


@dataclass
class Section:
    """A titled block of rows, and notes listed under them; without either, a heading line."""

    title: str | None = None
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, label: str, value: str = "", note: str = "") -> None:
        self.rows.append(Row(label, value, note))


class Reportable:
    """A result (a diagnosis, a warm-up) that prints and displays as its ``as_report()``: its
    repr is the text (as a DataFrame's is), so subclasses are ``@dataclass(repr=False)``."""

    def as_report(self) -> Report:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.as_report().text()

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """Both forms, whatever formatters the shell has enabled (a terminal IPython enables only
        text), so that a front end can choose."""
        report = self.as_report()
        return {"text/plain": report.text(), "text/html": report.html()}


@dataclass(repr=False)
class Report(Reportable):
    sections: list[Section]
    heading: str | None = None
    status: str | None = None  # colours the heading in HTML
    notes: list[str] = field(default_factory=list)
    figure: str | None = None  # trusted SVG, shown in HTML only
    css_class: str = "jupyter-gpu-report"

    def text(self) -> str:
        lines = [self.heading, ""] if self.heading else []
        for section in self.sections:
            lines += [section.title] if section.title else []
            lines += _text_rows(section.rows)
            lines += [f"  - {note}" for note in section.notes]
        lines += self.notes
        if self.figure:
            lines.append("(a drawing: shown in front ends that display HTML)")
        return "\n".join(lines)

    def html(self) -> str:
        parts = [f'<div class="{self.css_class}">']
        if self.heading:
            colour = f";color:{_COLOUR[self.status]}" if self.status else ""
            parts.append(f'<p style="font-weight:bold{colour}">{_prose(self.heading)}</p>')
        # Sections side by side where there is room (NVML's view beside the allocator's).
        parts.append('<div style="display:flex;flex-wrap:wrap;gap:0 2em;align-items:flex-start">')
        for section in self.sections:
            title = f"<b>{escape(section.title)}</b>" if section.title else ""
            if not section.rows and not section.notes:
                parts.append(f'<div style="flex-basis:100%">{title}</div>')
                continue
            rows = "".join(_html_row(row) for row in section.rows)
            notes = "".join(f"<li>{_prose(note)}</li>" for note in section.notes)
            parts.append(
                f'<div style="flex:1 1 24em">{title}'
                + (f"<table>{rows}</table>" if rows else "")
                + (f"<ul>{notes}</ul>" if notes else "")
                + "</div>"
            )
        parts.append("</div>")
        parts += [f"<p>{_prose(note)}</p>" for note in self.notes]
        parts += [self.figure] if self.figure else []
        parts.append("</div>")
        return "".join(parts)

    def as_report(self) -> Report:
        return self


_CODE = re.compile(r"`([^`]+)`")


def _prose(text: str) -> str:
    """``text`` as HTML, its `backticked` commands and names as <code> (text output keeps them)."""
    return _CODE.sub(r"<code>\1</code>", escape(text))


def _text_rows(rows: list[Row]) -> list[str]:
    """Checklist rows as ``[FAIL] label: note`` plus a fix line; others in aligned columns."""
    plain = [r for r in rows if r.status is None]
    label_width = max((len(r.label) for r in plain), default=0)
    value_width = max((len(r.value) for r in plain), default=0)
    lines = []
    for r in rows:
        if r.status is None:
            lines.append(f"  {r.label:<{label_width}}  {r.value:>{value_width}}  {r.note}".rstrip())
            continue
        lines.append(f"[{_LABEL[r.status]:>4}] {r.label}: {r.note}")
        if r.fix:
            lines.append(f"       fix: {r.fix}")
    return lines


def _html_row(r: Row) -> str:
    if r.status is None:
        label, value = (
            (f"<b>{escape(r.label)}</b>", f"<b>{escape(r.value)}</b>")
            if r.strong
            else (escape(r.label), escape(r.value))
        )
        return (
            f'<tr><td style="{_LEFT};white-space:nowrap">{label}</td>'
            f'<td style="text-align:right;white-space:nowrap">{value}</td>'
            f'<td style="{_LEFT}">{_prose(r.note)}</td></tr>'
        )
    badge = (
        f'<span style="color:#fff;background:{_COLOUR[r.status]};border-radius:3px;'
        f'padding:0 4px;font-size:85%">{_LABEL[r.status]}</span>'
    )
    fix = f'<div style="margin-top:2px"><b>Fix:</b> {_prose(r.fix)}</div>' if r.fix else ""
    detail = (
        f'<details><summary>details</summary><pre style="white-space:pre-wrap">{escape(r.detail)}'
        "</pre></details>"
        if r.detail
        else ""
    )
    return (
        f'<tr><td style="vertical-align:top">{badge}</td>'
        f'<td style="vertical-align:top;{_LEFT};white-space:nowrap">{escape(r.label)}</td>'
        f'<td style="{_LEFT}">{_prose(r.note)}{fix}{detail}</td></tr>'
    )
