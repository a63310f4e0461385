"""Read a kernel agent's stats file without trusting it.

Any process of the user can write into the runtime dir, and kernels die without cleaning up,
so every file is checked (at the kernel's private name while another user's file holds its name:
``runtime_dir.published_path``): ``runtime_dir.read_own_file`` (no symlink, no FIFO, a regular file
of this user that nobody else can write, at most ``MAX_BYTES``), the schema of
``analysis.stats_file`` (bounded numbers), the kernel id of its name, a recent timestamp and a
live PID. A refused file yields ``None`` and a reason; this never raises and never blocks.
The reason is a sentence for people that carries an ``AllocatorState`` for programs, so
that no client has to parse the sentence.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, TypedDict, cast

import psutil

from ..analysis.stats_file import MAX_BYTES, file_name, validate
from ..runtime_dir import NameTaken, RefusedFile, published_path, read_own_file
from .schema.replies import AllocatorState  # "ok": figures; "no_cuda": a file, no CUDA; else no file

if TYPE_CHECKING:
    from .schema.replies import AllocatorFigures

# The agent writes every second; a file this old belongs to a hung or dead kernel.
DEFAULT_MAX_AGE = 10.0

NO_CUDA = "PyTorch has not initialised CUDA in this kernel"


class Refusal(str):
    """Why a kernel's stats file was not used: the sentence, with its ``state`` for programs.

    A ``str`` so that ``read_kernel_stats`` keeps its ``(stats, reason)`` shape for its callers.
    """

    state: AllocatorState

    def __new__(cls, state: AllocatorState, text: str) -> Refusal:
        refusal = super().__new__(cls, text)
        refusal.state = state
        return refusal


class AllocatorFields(TypedDict):
    """A kernel's fields of the kernels reply that its stats file gives (``Kernel`` has them)."""

    allocator: AllocatorFigures | None
    allocator_state: AllocatorState
    allocator_reason: str | None


class KernelStats(NamedTuple):
    """``stats`` is the validated file plus ``age_seconds``; otherwise ``reason`` says why not."""

    stats: AllocatorFigures | None
    reason: Refusal | None
    # The kernel's process as NVML numbers it, where the kernel matched it across PID
    # namespaces (analysis/nvml_identity.py); None otherwise.
    nvml_pid: int | None = None
    # How far the agent got in finding its NVML process ("ambiguous", "matched", ...); None
    # before it looked or without a file.
    nvml_match: str | None = None

    def api_fields(self) -> AllocatorFields:
        """The kernel's ``allocator``, ``allocator_state`` and ``allocator_reason`` in the API."""
        state: AllocatorState
        if self.reason is not None:
            state, reason = self.reason.state, str(self.reason)
        elif self.stats is not None and self.stats["cuda_in_use"]:
            state, reason = "ok", None
        else:
            state, reason = "no_cuda", NO_CUDA
        return {"allocator": self.stats, "allocator_state": state, "allocator_reason": reason}


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _refused(state: AllocatorState, text: str) -> KernelStats:
    return KernelStats(None, Refusal(state, text))


def _read(runtime_dir: str | os.PathLike[str], kernel_id: str, name: str) -> bytes | KernelStats:
    """The file's bytes, or the refusal to read it."""
    try:
        return read_own_file(published_path(runtime_dir, kernel_id, name), MAX_BYTES)
    except FileNotFoundError:
        return _refused("no_stats", "no stats file: jupyter_gpu is not loaded in this kernel")
    except NameTaken as error:
        return _refused("refused", str(error))
    except RefusedFile as error:
        return _refused("refused", f"stats file {error}")


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
        return _refused("refused", "not a valid kernel id")
    data = _read(runtime_dir, kernel_id, name)
    if isinstance(data, KernelStats):
        return data
    try:
        doc = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return _refused("malformed", "stats file is not valid JSON (truncated or corrupt)")
    clean, reason = validate(doc, kernel_id)
    if clean is None:
        return _refused("malformed", f"stats file is malformed: {reason}")
    age = (time.time() if now is None else now) - clean["time"]
    if age > max_age:
        return _refused("stale", f"stats file is stale: written {age:.0f} s ago")
    if age < -max_age:
        return _refused("malformed", "stats file is dated in the future")
    try:
        alive = pid_alive(clean["pid"])
    except Exception:
        alive = False
    if not alive:
        return _refused("stale", f"stats file is stale: process {clean['pid']} is gone")
    clean["age_seconds"] = max(0.0, age)
    match = clean.pop("nvml_match")
    nvml_pid = clean.pop("nvml_pid")
    # analysis.stats_file.validate keeps the schema's allocator_figures fields, bounded
    return KernelStats(cast("AllocatorFigures", clean), None, nvml_pid if match == "matched" else None, match)
