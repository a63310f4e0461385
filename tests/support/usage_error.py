"""What a user sees when a magic refuses its input, read through IPython as a notebook shows it."""

from __future__ import annotations

from typing import Any


def one_usage_error(ip: Any, capsys: Any, source: str) -> str:
    """Run ``source`` as a cell of the in-process shell ``ip``; it must fail with one line,
    ``UsageError: ...``, and no traceback. Returns that line without its ``UsageError: ``."""
    capsys.readouterr()
    result = ip.run_cell(source)
    seen = capsys.readouterr()
    shown = seen.out + seen.err
    assert result.error_in_exec is not None, f"the cell did not fail: {shown!r}"
    assert type(result.error_in_exec).__name__ == "UsageError", shown
    assert "Traceback" not in shown and shown.count("\n") == 1, shown
    assert shown.startswith("UsageError: "), shown
    return shown.removeprefix("UsageError: ").rstrip("\n")
