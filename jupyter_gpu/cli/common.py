"""What every subcommand shares: exit codes, errors worth one line, JSON and tables."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from ..nvml.reasons import PROBLEMS

# Scripts branch on these; docs/reference/cli.md lists them.
EXIT_OK = 0
EXIT_FAIL = 1  # a check failed, or a server could not be asked
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_NO_GPU = 3  # nothing to check: no usable GPU, and the message says why


class CliError(Exception):
    """A problem the user can act on: printed as one line, never as a traceback."""

    def __init__(self, message: str, code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=1)
    sys.stdout.write("\n")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Columns padded to their widest cell; ``right`` aligns numbers to the right."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(cells, widths, right)
        ).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def no_gpu_text(where: str, reason: str, problem: str | None) -> str:
    """Why there is no GPU, for a terminal: what is wrong first, then the fix on lines of its own,
    wrapped to the terminal's width. ``reason`` is the sentence replies carry (what is wrong and
    the fix in one, ~400 characters for a missing driver); ``problem`` its kind, which names the
    two parts. A kind this version does not know keeps the sentence whole."""
    wrap = textwrap.TextWrapper(max(40, shutil.get_terminal_size().columns), break_on_hyphens=False)
    known = PROBLEMS.get(problem or "") or next((p for p in PROBLEMS.values() if p.sentence == reason), None)
    if known is None:
        return wrap.fill(f"No GPU ({where}): {reason}")
    what = wrap.fill(f"No GPU ({where}): {known.summary}.")
    wrap.initial_indent, wrap.subsequent_indent = "  fix: ", "       "
    return f"{what}\n{wrap.fill(known.fix)}"
