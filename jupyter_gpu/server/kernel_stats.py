"""Read a kernel agent's stats file without trusting it (DESIGN decision 6).

Any process of the user can write into the runtime dir, and kernels die without cleaning up,
so every file is checked: ``runtime_dir.read_own_file`` (no symlink, no FIFO, a regular file
of this user that nobody else can write, at most ``MAX_BYTES``), the schema of
``analysis.stats_file`` (bounded numbers), the kernel id of its name, a recent timestamp and a
live PID. A refused file yields ``None`` and a reason; this never raises and never blocks.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, NamedTuple

import psutil

from ..analysis.stats_file import MAX_BYTES, file_name, validate
from ..runtime_dir import RefusedFile, read_own_file

# The agent writes every second; a file this old belongs to a hung or dead kernel.
DEFAULT_MAX_AGE = 10.0


class KernelStats(NamedTuple):
    """``stats`` is the validated file plus ``age_seconds``; otherwise ``reason`` says why not."""

    stats: dict[str, Any] | None
    reason: str | None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _read(path: str) -> tuple[bytes | None, str | None]:
    try:
        return read_own_file(path, MAX_BYTES), None
    except FileNotFoundError:
        return None, "no stats file: jupyter_gpu is not loaded in this kernel"
    except RefusedFile as error:
        return None, f"stats file {error}"


def read_kernel_stats(
    runtime_dir: str | os.PathLike[str],
    kernel_id: str,
    *,
    now: float | None = None,
    max_age: float = DEFAULT_MAX_AGE,
    pid_alive: Callable[[int], bool] = psutil.pid_exists,
) -> KernelStats:
    """The allocator figures kernel ``kernel_id`` last published, if they can be trusted.

    ``pid_alive`` may be narrowed by the caller (e.g. to the kernel's own process tree).
    """
    try:
        name = file_name(kernel_id)
    except ValueError:
        return KernelStats(None, "not a valid kernel id")
    data, reason = _read(os.path.join(os.fspath(runtime_dir), name))
    if data is None:
        return KernelStats(None, reason)
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return KernelStats(None, "stats file is not valid JSON (truncated or corrupt)")
    clean, reason = validate(doc, kernel_id)
    if clean is None:
        return KernelStats(None, f"stats file is malformed: {reason}")
    age = (time.time() if now is None else now) - clean["time"]
    if age > max_age:
        return KernelStats(None, f"stats file is stale: written {age:.0f} s ago")
    if age < -max_age:
        return KernelStats(None, "stats file is dated in the future")
    try:
        alive = pid_alive(clean["pid"])
    except Exception:
        alive = False
    if not alive:
        return KernelStats(None, f"stats file is stale: process {clean['pid']} is gone")
    clean["age_seconds"] = max(0.0, age)
    return KernelStats(clean, None)
