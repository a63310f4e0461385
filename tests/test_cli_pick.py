"""``jupyter gpu pick`` (issue #28): the GPUs a job should use now, most free memory first, by
UUID for CUDA_VISIBLE_DEVICES; MIG devices as devices of their own. NVML is the simulated two-H200
machine here; without a GPU the command says why."""

from __future__ import annotations

import json

import pytest
from support.cli import ENV, cli
from support.paths import READINGS

from jupyter_gpu.analysis.gpu_choice import Candidate, NotEnough, candidates, choose
from jupyter_gpu.cli import main, pick
from jupyter_gpu.nvml import holders
from jupyter_gpu.nvml.simulated import SimulatedNVML

GIB = 2**30
GPU0, GPU1 = "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5", "GPU-d57917b3-7a1d-3f45-579e-d0c856ed9f9d"


def gpu(index: int, free_gib: float, **more) -> Candidate:
    return Candidate(index, f"GPU-{index}", "NVIDIA H200", int(free_gib * GIB), 140 * GIB, **more)


def test_the_most_free_first_counting_what_was_promised():
    gpus = [gpu(0, 10), gpu(1, 100), gpu(2, 60)]
    assert [d.index for d in choose(gpus, count=2)] == [1, 2]
    # 50 GiB already promised to a kernel starting on GPU 1: GPU 2 has more left
    assert [d.index for d in choose(gpus, promised={"GPU-1": 50 * GIB})] == [2]
    with pytest.raises(
        NotEnough, match=r"1 of 3 GPU\(s\) have 80.0 GiB free, 2 asked for; the most free: GPU 1"
    ):
        choose(gpus, count=2, memory=80 * GIB)


def test_a_gpu_in_mig_mode_is_never_picked_whole():
    devices = [
        {"index": 0, "uuid": "GPU-0", "mig_mode": {"current": True}, "mig": None, "memory_free_bytes": 140 * GIB, "memory_total_bytes": 140 * GIB},
        {"index": 2, "uuid": "MIG-a", "mig_mode": None, "mig": {"parent_index": 0}, "memory_free_bytes": 17 * GIB, "memory_total_bytes": 18 * GIB},
        {"index": 1, "uuid": "GPU-1", "mig_mode": {"current": False}, "mig": None, "memory_free_bytes": None, "memory_total_bytes": 140 * GIB},
    ]  # fmt: skip
    assert [d.uuid for d in candidates(devices)] == ["MIG-a"]  # GPU 1's memory cannot be read


def test_a_job_of_several_devices_gets_whole_gpus_never_mig_devices():
    # CUDA would show the job only the first MIG device of its CUDA_VISIBLE_DEVICES
    devices = [gpu(2, 17, mig=True), gpu(3, 17, mig=True), gpu(1, 10)]
    assert [d.index for d in choose(devices)] == [2]  # one device: a MIG slice is fine
    with pytest.raises(NotEnough, match=r"1 of 1 GPU\(s\).*2 asked for \(2 MIG device\(s\) left out"):
        choose(devices, count=2)
    assert [d.index for d in choose([*devices, gpu(0, 5)], count=2)] == [1, 0]


@pytest.fixture
def two_h200(monkeypatch):
    sim = SimulatedNVML.from_file(READINGS)
    monkeypatch.setattr(pick, "all_devices", lambda: holders.all_devices(sim))


def test_prints_uuids_for_cuda_visible_devices(two_h200, capsys):
    assert main(["pick"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{GPU1}\n"  # GPU 0 holds 3 GiB more
    assert "GPU 1: NVIDIA H200, 140 GiB free" in err
    assert main(["pick", "--count", "2", "--export"]) == 0
    assert capsys.readouterr().out == f"export CUDA_VISIBLE_DEVICES={GPU1},{GPU0}\n"
    assert main(["pick", "--json", "--memory", "100GiB"]) == 0
    assert [d["uuid"] for d in json.loads(capsys.readouterr().out)] == [GPU1]


def test_not_enough_memory_is_one_line_and_exit_1(two_h200, capsys):
    assert main(["pick", "--count", "2", "--memory", "139GiB"]) == 1
    assert capsys.readouterr().err == (
        "jupyter gpu pick: 1 of 2 GPU(s) have 139 GiB free, 2 asked for; the most free: "
        "GPU 1 (140 GiB free), GPU 0 (137 GiB free)\n"
    )


def test_without_a_gpu_or_with_a_bad_size_it_says_why():
    done = cli("pick", env={**ENV, "COLUMNS": "72"})
    assert done.returncode == 3 and done.stdout == ""
    lines = done.stderr.splitlines()  # what is wrong, then the fix, wrapped to the terminal
    assert lines[0].startswith("No GPU (from NVML on this machine): ") and all(
        len(line) <= 72 for line in lines
    )
    assert any(line.startswith("  fix: ") for line in lines), lines
    bad = cli("pick", "--memory", "lots")
    assert bad.returncode == 2 and "'lots' is not a size (e.g. 16GiB, 500MB, or bytes)" in bad.stderr
