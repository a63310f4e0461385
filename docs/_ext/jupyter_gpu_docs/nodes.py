"""docutils nodes built from plain text: help strings and docstrings are never parsed as markup,
so a stray ``*`` or ``_`` in one cannot break the build; only ```code``` spans become literals."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from docutils import nodes

CODE = re.compile(r"``(.+?)``|`([^`]+)`")  # reStructuredText's ``code`` or Markdown's `code`


def inline(text: str) -> list[nodes.Node]:
    """``text`` as text nodes, with its backtick spans as inline code."""
    out: list[nodes.Node] = []
    end = 0
    for match in CODE.finditer(text):
        if match.start() > end:
            out.append(nodes.Text(text[end : match.start()]))
        code = match.group(1) or match.group(2)
        out.append(nodes.literal(code, code))
        end = match.end()
    if end < len(text):
        out.append(nodes.Text(text[end:]))
    return out


def literal_block(text: str) -> nodes.literal_block:
    """Text shown as typed, never highlighted as Python."""
    node = nodes.literal_block(text, text)
    node["language"] = "text"
    return node


def paragraph(text: str) -> nodes.paragraph:
    return nodes.paragraph("", "", *inline(text))


def _is_example(line: str) -> bool:
    """A line of a docstring that shows a magic as typed (``%ddp_save ckpt --model m``)."""
    return line.startswith("%") or " = %" in line


def prose(text: str) -> list[nodes.Node]:
    """A docstring's paragraphs; lines that show a magic as typed become literal blocks."""
    out: list[nodes.Node] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        for example, group in itertools.groupby(lines, key=_is_example):
            run = list(group)
            out.append(literal_block("\n".join(run)) if example else paragraph(" ".join(run)))
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], widths: Sequence[int]) -> nodes.table:
    """A table whose cells are plain text with backtick code spans."""
    tgroup = nodes.tgroup(cols=len(headers))
    tgroup += [nodes.colspec(colwidth=w) for w in widths]
    head = nodes.thead()
    head += _row(headers)
    body = nodes.tbody()
    body += [_row(row) for row in rows]
    tgroup += [head, body]
    return nodes.table("", tgroup)


def _row(cells: Sequence[str]) -> nodes.row:
    row = nodes.row()
    row += [nodes.entry("", paragraph(cell)) if cell else nodes.entry() for cell in cells]
    return row


def section(title: str, name: str, document: nodes.document) -> nodes.section:
    """A section that the page's table of contents lists, with the anchor and the label
    ``make_id(name)`` (``magic-ddp-launch``), so that other pages can ``{ref}`` it."""
    label = nodes.make_id(name)
    node = nodes.section(ids=[label], names=[label])
    node += nodes.title(title, "", *inline(title))
    document.note_explicit_target(node)
    return node
