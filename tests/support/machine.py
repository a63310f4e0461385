"""What this machine has: whether an NVIDIA GPU answers here, and what nvidia-smi says of it."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess


def has_gpu() -> bool:
    """Whether ``nvidia-smi -L`` lists a GPU (it is missing or fails on a machine without one)."""
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


HAS_GPU = has_gpu()


def nvidia_smi(query: str, kind: str = "gpu") -> list[list[str]]:
    """``nvidia-smi --query-<kind>=<query>`` as rows of stripped fields (no header, no units)."""
    out = subprocess.run(
        ["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(out)) if row]
