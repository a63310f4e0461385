"""The bounded-number checks, fed what a hostile local user can write into a JSON file."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from jupyter_gpu.analysis.bounded import MAX_COUNT, is_int, is_number

# An attacker's JSON texts: bools, the non-standard constants Python's parser accepts, a float
# literal too big for a double, more digits than a double holds, and values of other types.
HOSTILE = [
    "true",
    "false",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    pytest.param("9" * 400, id="400 digits"),
    pytest.param("-" + "9" * 400, id="-400 digits"),
    '"1"',
    "null",
    "[1]",
    '{"n": 1}',
]


@pytest.mark.parametrize("text", HOSTILE)
def test_nothing_hostile_passes_either_check(text: str) -> None:
    value = json.loads(text)
    assert not is_int(value, -MAX_COUNT, MAX_COUNT)
    assert not is_number(value)


def test_1e400_and_a_400_digit_int_are_what_they_seem() -> None:
    """The reasons the checks exist: json gives inf for 1e400, and an int that isfinite() chokes on."""
    assert json.loads("1e400") == math.inf
    with pytest.raises(OverflowError):
        math.isfinite(json.loads("9" * 400))


@pytest.mark.parametrize(
    ("value", "low", "high", "passes"),
    [
        (0, 0, 10, True),
        (10, 0, 10, True),
        (11, 0, 10, False),
        (-1, 0, 10, False),  # a negative count
        (-5, -10, 10, True),  # a change may be negative when its bounds say so
        (1, 1, 2**22, True),
        (0, 1, 2**22, False),  # pid 0
        (2**22 + 1, 1, 2**22, False),
        (MAX_COUNT, 0, MAX_COUNT, True),
        (MAX_COUNT + 1, 0, MAX_COUNT, False),
        (1.0, 0, 10, False),  # a float is no count, even a whole one
        (True, 0, 10, False),  # bool subclasses int
    ],
)
def test_is_int_keeps_to_its_bounds(value: Any, low: int, high: int, passes: bool) -> None:
    assert is_int(value, low, high) is passes


@pytest.mark.parametrize(
    ("value", "low", "high", "passes"),
    [
        (0.5, 0, 1, True),
        (0, 0, 1, True),
        (1, 0, 1, True),
        (1.0000001, 0, 1, False),
        (-0.1, 0, 1, False),
        (-1.5, -math.inf, math.inf, True),  # a time before the epoch is a number
        (1e300, 0, math.inf, True),  # a finite float has no bound but its own
        (MAX_COUNT, 0, math.inf, True),
        (-MAX_COUNT, -math.inf, 0, True),
        (MAX_COUNT + 1, 0, math.inf, False),  # an int a float would round
        (-MAX_COUNT - 1, -math.inf, 0, False),
        (-3, 0, math.inf, False),  # a negative duration
        (True, 0, 1, False),
    ],
)
def test_is_number_keeps_to_its_bounds(value: Any, low: float, high: float, passes: bool) -> None:
    assert is_number(value, low, high) is passes


def test_the_default_bounds_are_every_finite_number() -> None:
    assert is_number(-1e308) and is_number(1e308) and is_number(0) and is_number(-0.0)
