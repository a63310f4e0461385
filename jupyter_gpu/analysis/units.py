"""Bytes and durations as people read them, in one style for every surface: three significant
figures in the largest unit that keeps the number below 1000 ("512 B", "3.00 GiB", "140 GiB";
"3.20 µs", "41.0 ms").

The frontend's twin is ``labextension/src/format.ts``; ``tests/fixtures/byte_formats.json`` holds
the table both must print alike. Numbers are rounded half away from zero as JavaScript's
``toFixed`` does, so a value that lies exactly halfway (1.125 GiB) prints the same in both.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

KiB = 1024
MiB = 1024**2
GiB = 1024**3
UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
MISSING = "n/a"


def _fixed(x: float, digits: int) -> str:
    """``x`` with ``digits`` decimals, halves away from zero: ``Number.prototype.toFixed``."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _three_figures(x: float) -> str:
    """1.23, 12.3, 123; 0 stays "0". Decimals chosen after rounding, so 9.999 is "10.0"."""
    if x == 0:
        return "0"
    for digits, limit in ((2, 10), (1, 100)):
        text = _fixed(x, digits)
        if abs(float(text)) < limit:
            return text
    return _fixed(x, 0)


def _scaled(x: float, power: int) -> str:
    return _fixed(x, 0) if power == 0 else _three_figures(x / KiB**power)


def _unit_power(x: float) -> int:
    """The power of 1024 whose unit prints ``x`` (>= 0) as a number below 1000."""
    power = 0
    while power < len(UNITS) - 1 and float(_scaled(x, power)) >= 1000:
        power += 1
    return power


def _known(n: float | None) -> bool:
    return n is not None and math.isfinite(n)


def format_bytes(n: int | float | None) -> str:
    """``n`` bytes, e.g. "38.0 MiB"; "n/a" when the figure is unknown."""
    if n is None or not _known(n):
        return MISSING
    power = _unit_power(abs(n))
    return f"{'-' if n < 0 else ''}{_scaled(abs(n), power)} {UNITS[power]}"


def format_bytes_change(n: int | float | None) -> str:
    """A change in memory, always signed: "+1.50 GiB", "-512 MiB", "+0 B"."""
    if n is None or not _known(n):
        return MISSING
    return f"{'+' if n >= 0 else ''}{format_bytes(n)}"


def format_bytes_of(used: int | float | None, total: int | float | None) -> str:
    """ "used / total" in the unit of the total, e.g. "30.1 / 140 GiB"; a ``used`` too small to
    show in that unit gets its own ("3.25 MiB / 140 GiB")."""
    if total is None or not _known(total):
        return format_bytes(used)
    power = _unit_power(abs(total))
    of = f"{_scaled(total, power)} {UNITS[power]}"
    if used is None or not _known(used):
        return f"{MISSING} / {of}"
    if 0 < used < KiB**power / 100:
        return f"{format_bytes(used)} / {of}"
    return f"{_scaled(used, power)} / {of}"


def _js_round(x: float) -> int:
    """JavaScript's ``Math.round``: halves go up (Python's ``round`` goes to even)."""
    return math.floor(x + 0.5)


def format_duration(seconds: float | None) -> str:
    """A duration as "45 s", "3 min", "2 h": ``formatAge`` of ``labextension/src/format.ts``."""
    if seconds is None or not _known(seconds):
        return MISSING
    if seconds < 90:
        return f"{max(0, _js_round(seconds))} s"
    if seconds < 90 * 60:
        return f"{_js_round(seconds / 60)} min"
    return f"{_js_round(seconds / 3600)} h"


def format_us(us: float) -> str:
    """A span measured in µs (a kernel, a cell) in µs, ms or s: "3.20 µs", "41.0 ms", "1.50 s"."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(us) >= scale:
            return f"{_three_figures(us / scale)} {unit}"
    return f"{_three_figures(us)} µs"


def format_countdown(seconds: float) -> str:
    """Time left before something happens, to the second under an hour: "45 s", "1 min 0 s",
    "2 h 5 min" (``formatCountdown`` of ``labextension/src/format.ts``). ``format_duration``'s
    "1 min" would read as anything from 30 s to 90 s to someone about to lose her server."""
    total = max(0, _js_round(seconds)) if _known(seconds) else 0
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60} min {total % 60} s"
    return f"{total // 3600} h {total % 3600 // 60} min"
