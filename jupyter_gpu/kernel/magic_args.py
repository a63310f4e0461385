"""The one parser of magic argument lines: IPython's ``parse_argstring``, with no traceback, and
the ``type=`` checks of the paths that magics take.

``parse_argstring`` already turns argparse errors into ``UsageError``, but the shell-like split
before it raises a bare ``ValueError`` for an unbalanced quote (``%gpu_mem '``). That split is a
non-POSIX shell's: it keeps the quotes, so a path option is unquoted by its ``type=``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import unicodedata
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring

SHOWN_CHARS = 80  # of a refused path: enough to recognise it, bounded for a pasted megabyte


def parse(func: Callable[..., Any], line: str) -> argparse.Namespace:
    """Parse ``line`` with the parser ``magic_arguments`` attached to ``func``."""
    try:
        return parse_argstring(func, line)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"cannot read the arguments {line.strip()!r}: {exc}") from None


def shown(text: str) -> str:
    """``text`` quoted for an error line, cut short: a pasted megabyte stays one short line."""
    return repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...")


def path_text(text: str) -> str:
    """``type=`` of a path: refused as one line when no file should have that name. The OS
    refuses a NUL with a ``ValueError`` from deep inside the magic; a newline or another
    control character would hide the file in listings and break the next tool that reads one."""
    bad = next((c for c in text if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} holds the control character {bad!r}, which a path here may not"
        )
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{shown(text)} cannot be a file name here") from None
    return text


def quoted_path(text: str) -> str:
    """``type=`` of a path the user may quote: ``'a b.json'`` is the file ``a b.json``. A
    backslash stays as typed, as in the split before (no escapes there either)."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split, lexer.commenters, lexer.escape = True, "", ""
    try:
        words = list(lexer)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {shown(text)}: {exc}") from None
    if len(words) != 1 or not words[0]:
        raise argparse.ArgumentTypeError(f"{shown(text)}: give one path (quote it if it has spaces)")
    return path_text(words[0])


def quoted_text(text: str) -> str:
    """``type=`` of an expression the user may quote to keep its spaces: ``"torch.randn(8, 3)"``
    is ``torch.randn(8, 3)``; an unquoted one stays as typed."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text
