"""CUDA workloads shared by the gpu tests and benchmarks/kernel_agent.py."""

from __future__ import annotations

from typing import Any


def fragment(torch: Any, large: int = 200, small: int = 0) -> list[Any]:
    """Interleaved frees like the fixture's capture: 3–21 MB blocks with every other one freed,
    then small blocks with two of three freed. Returns the tensors kept alive."""
    keep = []
    for i in range(large):
        t = torch.empty((3 + i % 19) * 1_000_000, dtype=torch.uint8, device="cuda")
        if i % 2 == 0:
            keep.append(t)
    for i in range(small):
        t = torch.empty(1000 + 997 * i, dtype=torch.uint8, device="cuda")
        if i % 3 == 0:
            keep.append(t)
    return keep
