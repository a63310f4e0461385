"""Bytes print alike everywhere: the table in fixtures/byte_formats.json is also the frontend's
(labextension/src/__tests__/format.test.ts reads it), so Python and TypeScript cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_gpu.analysis.units import (
    format_bytes,
    format_bytes_change,
    format_bytes_of,
    format_countdown,
    format_duration,
)

TABLE = json.loads((Path(__file__).parent / "fixtures" / "byte_formats.json").read_text())


@pytest.mark.parametrize(("n", "text"), TABLE["bytes"])
def test_bytes(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize(("used", "total", "text"), TABLE["bytes_of"])
def test_used_of_total(used, total, text):
    assert format_bytes_of(used, total) == text


@pytest.mark.parametrize(("n", "text"), TABLE["changes"])
def test_changes_are_signed(n, text):
    assert format_bytes_change(n) == text


@pytest.mark.parametrize(("seconds", "text"), TABLE["durations"])
def test_durations_print_as_the_panel_prints_them(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), TABLE["countdowns"])
def test_countdowns_print_as_the_notification_prints_them(seconds, text):
    assert format_countdown(seconds) == text


def test_unknown_figures():
    assert format_bytes(None) == format_bytes(float("nan")) == format_bytes_change(None) == "n/a"
    assert format_bytes_of(None, 140 * 2**30) == "n/a / 140 GiB"
