"""Read the figures torch puts into a CUDA out-of-memory message.

Keys on the phrases that have been stable across torch versions ("Tried to allocate", "is
reserved by PyTorch but unallocated"), never on the documentation URL, which changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .units import GiB, KiB, MiB

_SIZE = r"([0-9.]+) ?(B|bytes|KiB|MiB|GiB|TiB)"
_UNITS = {"B": 1, "bytes": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": 1024 * GiB}


@dataclass(frozen=True)
class OomMessage:
    """The figures torch puts into a CUDA out-of-memory message (None where absent)."""

    requested_bytes: int | None
    device: int | None
    total_bytes: int | None
    free_bytes: int | None
    process_bytes: int | None
    allowed_bytes: int | None
    pytorch_allocated_bytes: int | None
    reserved_unallocated_bytes: int | None


def _size(match: re.Match[str] | None, group: int = 1) -> int | None:
    if match is None:
        return None
    return int(float(match.group(group)) * _UNITS[match.group(group + 1)])


def parse_oom_message(text: str) -> OomMessage | None:
    """Read a ``torch.OutOfMemoryError`` message; None when it is not a CUDA one."""
    if "CUDA out of memory" not in text:
        return None
    device = re.search(r"GPU (\d+) has a total capacity of " + _SIZE + r" of which " + _SIZE, text)
    return OomMessage(
        requested_bytes=_size(re.search(r"Tried to allocate " + _SIZE, text)),
        device=int(device.group(1)) if device else None,
        total_bytes=_size(device, 2),
        free_bytes=_size(device, 4),
        process_bytes=_size(re.search(r"this process has " + _SIZE + r" memory in use", text)),
        allowed_bytes=_size(re.search(_SIZE + r" allowed;", text)),
        pytorch_allocated_bytes=_size(re.search(_SIZE + r" is allocated by PyTorch", text)),
        reserved_unallocated_bytes=_size(re.search(_SIZE + r" is reserved by PyTorch but unallocated", text)),
    )
