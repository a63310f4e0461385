"""Waiting in a test: poll until something holds, and fail naming what never came (a wait in a
test never ends quietly). ``wait_until`` for plain code, ``wait_for`` in a server test's loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(what: str, check: Callable[[], T], timeout: float = 10.0) -> T:
    """Poll ``check`` until it returns something true, and return that; fail naming ``what``
    once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}", pytrace=False)
        time.sleep(0.01)
    return value


async def wait_for(
    predicate: Callable[[], Awaitable[T | None]], timeout: float = 5.0, *, what: str | None = None
) -> T:
    """Await ``predicate()`` until it gives something true and return that; fail naming ``what``
    (the predicate's name where none is given) once ``timeout`` seconds have passed."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not (result := await predicate()):
        if asyncio.get_running_loop().time() > deadline:
            waited = what or getattr(predicate, "__name__", repr(predicate))
            pytest.fail(f"timed out after {timeout:g} s waiting for {waited}", pytrace=False)
        await asyncio.sleep(0.05)
    return result


def holds(check: Callable[[], T | None]) -> Callable[[], Awaitable[T | None]]:
    """``check`` as ``wait_for``'s predicate: a test on the event loop must not block it."""

    async def predicate() -> T | None:
        return check()

    predicate.__name__ = getattr(check, "__name__", "predicate")
    return predicate
