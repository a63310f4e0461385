"""Bounded-number checks for JSON that someone else wrote: a kernel's stats and cells files,
which any local user can put in the runtime dir, and students' servers' replies to the Hub view.

On a shared machine that input is hostile, and ``json`` hands back more than numbers: ``true``
is an int (bool subclasses it), ``NaN``, ``Infinity`` and ``1e400`` are floats, and a long run of
digits is an int no float can hold (``float(10**400)`` and ``math.isfinite(10**400)`` raise).
A value these checks pass can be summed, compared, formatted and written out as JSON again.
Strings are bounded by ``cut``, which keeps a readable start and says that something was cut.
"""

from __future__ import annotations

import math
from typing import Any

# Counts and byte sizes a double holds exactly; far above any GPU's memory (2**53 B = 8 PiB).
MAX_COUNT = 2**53


def is_int(value: Any, low: int, high: int) -> bool:
    """An int from ``low`` to ``high``; a bool is not one."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def is_number(value: Any, low: float = -math.inf, high: float = math.inf) -> bool:
    """A finite float, or an int within ±MAX_COUNT (which a float holds exactly), from ``low``
    to ``high``; a bool is not one."""
    if isinstance(value, float):
        return math.isfinite(value) and low <= value <= high
    return is_int(value, -MAX_COUNT, MAX_COUNT) and low <= value <= high


def cut(text: str, limit: int) -> str:
    """``text`` as it is when at most ``limit`` characters, else its start and "…" in ``limit``:
    a string from someone else goes on a page or into a message without its megabytes."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "\u2026"
