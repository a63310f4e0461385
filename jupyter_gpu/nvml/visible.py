"""Which GPUs CUDA will show this process, told from ``CUDA_VISIBLE_DEVICES`` and the driver's
``/proc`` entries: no CUDA call (so no context) and no NVML initialisation.

CUDA reads the variable left to right and stops at the first entry it cannot use: a negative
index (``-1`` hides every GPU, ``0,-1,1`` shows only GPU 0), an index past the last GPU, a UUID
prefix no GPU has, or anything else. Set but empty shows none; unset shows every GPU.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

_UUID_LINE = re.compile(r"^GPU UUID:\s*(\S+)", re.M)


def parse_visible_devices(value: str, gpus: Sequence[str | None] | None) -> tuple[list[str], str | None]:
    """The entries of ``value`` that CUDA will use, and why it stopped early (None if it did not).

    ``gpus``: the UUIDs of the machine's GPUs in index order (None where unknown), or None when
    not even their number is known; then indices and UUIDs are taken on trust.
    """
    uuids = [u for u in gpus or [] if u]
    used: list[str] = []
    for token in (t.strip() for t in value.split(",")):
        if re.fullmatch(r"-?\d+", token):
            if int(token) < 0:
                return used, f"'{token}' hides every entry after it"
            if gpus is not None and int(token) >= len(gpus):
                return used, f"there is no GPU {token} (this machine has {len(gpus)})"
        elif token.startswith("GPU-"):
            if uuids and not any(u.startswith(token) for u in uuids):
                return used, f"no GPU's UUID starts with '{token}'"
        elif not token.startswith("MIG-"):
            return used, f"'{token}' is neither a GPU index nor a UUID"
        used.append(token)
    return used, None


def driver_gpus(root: Path = Path("/")) -> list[str | None]:
    """The UUID of each GPU the NVIDIA driver knows (None where its entry cannot be read), from
    ``/proc/driver/nvidia/gpus``; empty without a driver."""
    try:
        entries = sorted((root / "proc/driver/nvidia/gpus").iterdir())
    except OSError:
        return []
    uuids: list[str | None] = []
    for entry in entries:
        try:
            match = _UUID_LINE.search((entry / "information").read_text())
        except OSError:
            match = None
        uuids.append(match[1] if match else None)
    return uuids


def visible_gpus(env: Mapping[str, str] | None = None, root: Path = Path("/")) -> int:
    """How many GPUs CUDA will show a process with this environment (default: this one's)."""
    gpus = driver_gpus(root)
    value = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if value is None or not gpus:
        return len(gpus)
    used, _ = parse_visible_devices(value, gpus)
    return len(used)
