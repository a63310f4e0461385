"""``PYTORCH_CUDA_ALLOC_CONF`` as text: split into options as torch's parser splits it, and a memory
quota written into it as ``per_process_memory_fraction`` (pure; the doctor reads the options, the
server writes the quota into each kernel's environment).

The fraction is of each GPU's memory, as torch applies it, so a quota in bytes becomes the fraction
of the largest GPU: on no GPU may a kernel take more than the quota.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

FRACTION = "per_process_memory_fraction"
# What the server tells each kernel it starts: the quota in bytes, and who set it (in words).
LIMIT_ENV = "JUPYTER_GPU_KERNEL_MEMORY_LIMIT"
SOURCE_ENV = "JUPYTER_GPU_KERNEL_MEMORY_LIMIT_SOURCE"


def split_options(text: str) -> list[str]:
    """Split on commas outside brackets: ``roundup_power2_divisions:[256:1,>:4]`` is one option."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [i.strip() for i in items + [current] if i.strip()]


def quota_fraction(limit_bytes: int, gpu_total_bytes: Sequence[int]) -> float:
    """The fraction of every GPU's memory that keeps a process within ``limit_bytes`` on each."""
    return min(1.0, limit_bytes / max(gpu_total_bytes))


def with_memory_fraction(text: str | None, fraction: float) -> str:
    """``text`` with the quota's fraction; a smaller one the user set stays (a quota caps, it never
    raises), and so does every other option, in its place."""
    options = split_options(text or "")
    own: float | None = None
    kept = []
    for option in options:
        key, _, value = (part.strip() for part in option.partition(":"))
        if key != FRACTION:
            kept.append(option)
            continue
        try:
            own = float(value)
        except ValueError:
            own = None  # torch would stop at it: the quota's value replaces it
    chosen = fraction if own is None or not 0 < own < fraction else own
    # rounded down: the written fraction never allows more than the quota (nor is it 0, which
    # torch would read as no memory at all)
    return ",".join([*kept, f"{FRACTION}:{max(1e-6, math.floor(chosen * 1e6) / 1e6)!r}"])
