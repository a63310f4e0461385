"""Tracebacks of a rank, captured where they happen and shown with the notebook cell's numbers.

A rank compiles the cell under the file name ``<ddp-cell rank k>`` with the cell's own line
numbering (the magic line counts), so its frames already carry the right numbers; ``render``
replaces that file name with IPython's ``Cell In[n]`` and takes the source lines from the cell
the kernel holds. Frames of this package (the ``exec`` that ran the cell) are dropped.
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass, field

_CELL_FILE = re.compile(r"^<ddp-cell rank (\d+)>$")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def cell_filename(rank: int) -> str:
    """File name a rank compiles the cell under; ``render`` recognises it."""
    return f"<ddp-cell rank {rank}>"


@dataclass
class RemoteFrame:
    filename: str
    lineno: int | None
    name: str
    line: str


@dataclass
class RemoteError:
    """An exception of a rank, as data: no class has to be importable in the kernel."""

    type_name: str
    exception_only: list[str]  # traceback.format_exception_only lines (SyntaxError carets, notes)
    frames: list[RemoteFrame] = field(default_factory=list)
    cause: RemoteError | None = None
    context: RemoteError | None = None

    @property
    def summary(self) -> str:
        return (
            "".join(self.exception_only).strip().splitlines()[-1] if self.exception_only else self.type_name
        )


def _internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR) if not filename.startswith("<") else False


def _from_te(te: traceback.TracebackException, seen: set[int]) -> RemoteError:
    seen.add(id(te))
    frames = [
        RemoteFrame(f.filename, f.lineno, f.name, (f.line or "").strip())
        for f in te.stack
        if not _internal(f.filename)
    ]
    err = RemoteError(
        type_name=te.exc_type.__name__ if te.exc_type else "Exception",
        exception_only=list(te.format_exception_only()),
        frames=frames,
    )
    if te.__cause__ is not None and id(te.__cause__) not in seen:
        err.cause = _from_te(te.__cause__, seen)
    elif te.__context__ is not None and not te.__suppress_context__ and id(te.__context__) not in seen:
        err.context = _from_te(te.__context__, seen)
    return err


def capture(exc: BaseException) -> RemoteError:
    """Describe ``exc`` (with its cause/context chain) without the frames of this package."""
    return _from_te(traceback.TracebackException.from_exception(exc), set())


def _render_one(err: RemoteError, cell_lines: list[str], label: str) -> list[str]:
    out: list[str] = []
    if err.frames:
        out.append("Traceback (most recent call last):\n")
    for frame in err.frames:
        match = _CELL_FILE.match(frame.filename)
        if match:
            line = frame.line
            if frame.lineno is not None and 0 < frame.lineno <= len(cell_lines):
                line = cell_lines[frame.lineno - 1].strip()
            where = f"  Cell {label}, line {frame.lineno}"
            out.append(f"{where}\n" if frame.name == "<module>" else f"{where}, in {frame.name}\n")
        else:
            line = frame.line
            out.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n')
        if line:
            out.append(f"    {line}\n")
    for text in err.exception_only:
        match = re.search(r'File "(<ddp-cell rank \d+>)", line (\d+)', text)
        out.append(text.replace(f'File "{match.group(1)}"', f"Cell {label}") if match else text)
    return out


def render(err: RemoteError, cell_source: str, label: str) -> list[str]:
    """Lines of a traceback like IPython's, for the cell whose full text is ``cell_source``.

    ``label`` names the cell as IPython does (``In[7]``); chained exceptions come first.
    """
    cell_lines = cell_source.splitlines()
    if err.cause is not None:
        head = render(err.cause, cell_source, label)
        head.append("\nThe above exception was the direct cause of the following exception:\n\n")
        return head + _render_one(err, cell_lines, label)
    if err.context is not None:
        head = render(err.context, cell_source, label)
        head.append("\nDuring handling of the above exception, another exception occurred:\n\n")
        return head + _render_one(err, cell_lines, label)
    return _render_one(err, cell_lines, label)


class DDPError(Exception):
    """A launch or cell failed on some rank; IPython shows ``lines`` instead of kernel internals."""

    def __init__(self, summary: str, lines: list[str]) -> None:
        super().__init__(summary)
        self.lines = lines

    def _render_traceback_(self) -> list[str]:
        return "".join(self.lines).rstrip("\n").split("\n")


class DDPInterrupted(DDPError, KeyboardInterrupt):
    """The user interrupted the kernel (or ``--timeout`` ran out) and the ranks were stopped."""


class BadInput(ValueError):
    """What the user asked for cannot be done (a name not defined, a folder not theirs): one
    line, no traceback. The magics show it as IPython's ``UsageError``."""
