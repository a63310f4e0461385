"""The one count of visible GPUs: CUDA_VISIBLE_DEVICES read as CUDA reads it, against the
driver's /proc entries, without CUDA or NVML."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.imports import modules_after

from jupyter_gpu.nvml.visible import driver_gpus, visible_gpus

UUIDS = ["GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5", "GPU-6f1c9a0e-0d5e-7b1a-93c4-1c2b3d4e5f60"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A /proc with the driver's entries for two H200s."""
    for bus, uuid in zip(("0000:19:00.0", "0000:3b:00.0"), UUIDS):
        entry = tmp_path / "proc/driver/nvidia/gpus" / bus
        entry.mkdir(parents=True)
        (entry / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 18\nGPU UUID: \t GPU-{uuid[4:]}\n"
        )
    return tmp_path


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (None, 2),
        ("", 0),
        ("-1", 0),
        ("0,-1,1", 1),  # CUDA stops at the first negative index
        ("1", 1),
        ("1,0", 2),
        ("0,5,1", 1),  # ... and at the first index past the last GPU
        ("GPU-6f1c", 1),
        ("GPU-ffff,0", 0),
        ("MIG-4f2a", 1),
        ("0,abc", 1),
    ],
)
def test_visible_gpus_follow_cuda(root, value, count):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    assert visible_gpus(env, root) == count


def test_without_a_driver_nothing_is_visible(tmp_path):
    assert driver_gpus(tmp_path) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1"}, tmp_path) == 0


def test_an_unreadable_entry_still_counts(root):
    (next((root / "proc/driver/nvidia/gpus").iterdir()) / "information").unlink()
    assert driver_gpus(root) == [None, UUIDS[1]]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-6f1c,1"}, root) == 2


def test_counting_imports_neither_torch_nor_pynvml():
    code = "from jupyter_gpu.nvml.visible import visible_gpus; visible_gpus()"
    assert modules_after(code, ("torch", "pynvml")) == []
