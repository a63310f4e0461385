"""The one parser of magic argument lines: IPython's ``parse_argstring``, with no traceback.

``parse_argstring`` already turns argparse errors into ``UsageError``, but the shell-like split
before it raises a bare ``ValueError`` for an unbalanced quote (``%gpu_mem '``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import parse_argstring


def parse(func: Callable[..., Any], line: str) -> argparse.Namespace:
    """Parse ``line`` with the parser ``magic_arguments`` attached to ``func``."""
    try:
        return parse_argstring(func, line)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"cannot read the arguments {line.strip()!r}: {exc}") from None
