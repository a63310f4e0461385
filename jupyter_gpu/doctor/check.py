"""What every check returns, and what many of them ask first: is there a CUDA build of torch,
and did the driver answer with GPUs?

The checks themselves are pure functions from ``Facts`` to ``Check``, grouped by what they
check (``torch_checks``, ``driver_checks``, ``envchecks``, ``alloc_conf``, ``server_checks``);
their order is in ``checklist.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from .facts import Facts


class Status(str, Enum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    status: Status
    summary: str
    fix: str | None = None
    detail: str | None = None


def cuda_build(f: Facts) -> bool:
    """torch imports and is built for CUDA: the checks of torch's CUDA side apply."""
    return bool(f.torch.installed and not f.torch.import_error and f.torch.cuda)


def driver_ok(f: Facts) -> bool:
    """NVML answered and listed GPUs: the checks of the GPUs themselves apply."""
    return f.nvml.error_kind is None and bool(f.nvml.devices)


def count_names(names: Iterable[str | None]) -> str:
    """ "2× NVIDIA H200" rather than the same name twice."""
    counts = Counter(n or "unnamed GPU" for n in names)
    return ", ".join(f"{c}× {n}" if c > 1 else n for n, c in counts.items())
