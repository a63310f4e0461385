"""The per-cell GPU timeline without a GPU: what a cell's record says (pure), and what a kernel
records (a real IPython shell over a fake torch and simulated NVML).

What the server takes from a timeline file and how it serves it is in test_cell_history.py, the
real server and kernel in test_cell_timeline_server.py; the GPU figures are checked against
torch on an H200 in test_cell_timeline_gpu.py.
"""

from __future__ import annotations

import json
import os

import pytest
from IPython.utils.capture import capture_output
from support.cell_records import KERNEL_ID, document, record
from support.fake_torch import OOM_TEXT, UUID0, FakeCuda, install
from support.ipython_shell import shared_shell

from jupyter_gpu.analysis.cells import (
    MAX_CELLS,
    DeviceReading,
    cells_file_name,
    device_change,
    outcome,
    validate,
)
from jupyter_gpu.kernel import memory_magic, oom, timeline

GiB = 1024**3


def reading(allocated: int, peak: int, *, reserved: int = 0, ooms: int = 0, process: int | None = 0):
    return DeviceReading(0, f"GPU-{UUID0}", allocated, reserved, peak, ooms, process)


# -- what a record says ----------------------------------------------------------------------


def test_a_cell_that_keeps_memory_left_it_and_set_a_new_peak():
    change = device_change(
        reading(1 * GiB, 1 * GiB, reserved=2 * GiB), reading(3 * GiB, 5 * GiB, reserved=6 * GiB)
    )
    assert change["allocated_change_bytes"] == 2 * GiB
    assert change["peak_allocated_bytes"] == 5 * GiB and change["peak_at_most_bytes"] is None
    assert change["reserved_change_bytes"] == 4 * GiB


def test_a_cell_below_an_earlier_peak_gets_only_a_bound():
    """torch's peak is never reset, so a cell under the kernel's old high water has no exact peak."""
    change = device_change(reading(1 * GiB, 8 * GiB), reading(1 * GiB, 8 * GiB))
    assert change["peak_allocated_bytes"] is None and change["peak_at_most_bytes"] == 8 * GiB
    assert change["allocated_change_bytes"] == 0


def test_a_user_who_resets_the_peak_in_a_cell_gets_a_bound_that_still_holds():
    change = device_change(reading(1 * GiB, 8 * GiB), reading(1 * GiB, 2 * GiB))
    assert change["peak_allocated_bytes"] is None and change["peak_at_most_bytes"] == 8 * GiB


def test_a_cell_that_started_cuda_is_measured_from_nothing():
    change = device_change(None, reading(GiB, 2 * GiB, reserved=2 * GiB, process=3 * GiB))
    assert change["allocated_change_bytes"] == GiB and change["peak_allocated_bytes"] == 2 * GiB
    assert change["process_change_bytes"] == 3 * GiB  # the context came with the cell


def test_nvml_that_cannot_see_the_process_gives_no_figure_not_zero():
    assert (
        device_change(reading(0, 0, process=None), reading(GiB, GiB, process=2 * GiB))["process_change_bytes"]
        is None
    )


class TorchOOM(RuntimeError):
    pass


TorchOOM.__name__ = "OutOfMemoryError"
TorchOOM.__module__ = "torch"


@pytest.mark.parametrize(
    ("error", "ooms_rose", "expected"),
    [
        (None, False, "ok"),
        (ZeroDivisionError(), False, "error"),
        (KeyboardInterrupt(), False, "interrupted"),
        (TorchOOM("CUDA out of memory"), False, "oom"),
        (RuntimeError("caught and re-raised by a library"), True, "oom"),
    ],
)
def test_outcomes(error, ooms_rose, expected):
    assert outcome(error, ooms_rose) == expected


def test_a_cell_id_that_is_not_one_is_dropped():
    assert record(cell_id="../../etc")["cell_id"] is None
    assert record(cell_id="x" * 65)["cell_id"] is None


def test_the_kernels_own_records_pass_validation():
    cells = [record(0), record(1, before={0: reading(0, 0)}, after={0: reading(GiB, GiB)})]
    clean, reason = validate(document(cells), KERNEL_ID)
    assert reason is None and clean["cells"] == cells


def _gpu_cell(**gpu_changes) -> dict:
    cell = record(0, before={0: reading(0, 0)}, after={0: reading(GiB, GiB)})
    cell["gpus"][0].update(gpu_changes)
    return cell


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (document([], kernel_id="another-kernel"), "kernel_id does not match"),
        (document([], version=True), "unsupported version"),
        (document([], pid=0), "pid is not"),
        (document([record(0)] * (MAX_CELLS + 1)), "at most 1000"),
        (document([record(1), record(0)]), "increasing seq"),
        (document([{**record(0), "outcome": "fine"}]), "outcome"),
        (document([{**record(0), "start": float("inf")}]), "start is not"),
        (document([{**record(0), "end": 1.0}]), "ends before it starts"),
        (document([{**record(0), "cell_id": "<script>"}]), "cell_id"),
        (document([{**record(0), "execution_count": True}]), "execution_count"),
        (document([_gpu_cell(allocated_bytes=2**60)]), "allocated_bytes"),
        (document([_gpu_cell(allocated_change_bytes=-(2**60))]), "allocated_change_bytes"),
        (document([_gpu_cell(peak_at_most_bytes=GiB)]), "exactly one of"),
        (document([_gpu_cell(index=64)]), "gpu index"),
        (document([{**_gpu_cell(), "gpus": [_gpu_cell()["gpus"][0]] * 2}]), "listed twice"),
        (document([{**record(0), "ranks": [{"rank": 0, "gpus": []}] * 2}]), "rank 0 is listed twice"),
        (document([{**record(0), "ranks": [{"rank": r, "gpus": []} for r in range(65)]}]), "at most 64"),
        (document([{**record(0), "ranks": [{"rank": 0, "gpus": [{"index": 0}]}]}]), "allocated_bytes"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_tampered_file_is_refused_with_the_reason(doc, reason):
    clean, why = validate(json.loads(json.dumps(doc)), KERNEL_ID)
    assert clean is None and reason in why


# -- what a kernel records -------------------------------------------------------------------


@pytest.fixture
def ip():
    shell = shared_shell()
    undo = [timeline.register(shell), memory_magic.register(shell), oom.register(shell)]
    yield shell
    for remove in reversed(undo):
        remove()


def _run(ip, code: str) -> str:
    with capture_output() as captured:
        ip.run_cell(code, store_history=True)  # as a kernel runs cells: counted
    return captured.stdout


def _cells(ip) -> list[dict]:
    return timeline.timeline_of(ip).cells()


def test_cells_without_cuda_are_recorded_without_gpu_figures_and_without_touching_cuda(ip, monkeypatch):
    cuda = FakeCuda(initialized=False)
    install(monkeypatch, cuda)
    _run(ip, "x = 1")
    _run(ip, "1 / 0")
    (ok, error) = _cells(ip)
    assert (ok["outcome"], error["outcome"]) == ("ok", "error")
    assert ok["gpus"] == [] and error["gpus"] == []
    assert error["execution_count"] == ok["execution_count"] + 1
    assert set(cuda.calls) == {"is_initialized"}  # nothing that could initialise CUDA


def test_a_kernel_without_torch_records_cells_and_never_imports_it(ip, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    _run(ip, "y = 2")
    assert _cells(ip)[-1]["gpus"] == [] and "torch" not in __import__("sys").modules


def _allocate(stats_key: str, n: int) -> str:
    return f"import torch; torch.cuda.stats[0][{stats_key!r}] += {n}"


def test_what_a_cell_left_its_peak_and_the_process_memory_nvml_saw(ip, monkeypatch, nvml):
    monkeypatch.setattr(timeline.ProcessMemory, "FRESH_SECONDS", 0.0)  # NVML asked at each edge
    cuda = FakeCuda()
    install(monkeypatch, cuda)
    stats = cuda.stats[0]
    nvml_process = nvml.readings["devices"][0]["compute_processes"][0]
    assert nvml_process["pid"] == os.getpid()
    before_alloc, before_peak = stats["allocated_bytes.all.current"], stats["allocated_bytes.all.peak"]
    code = (
        "import torch\n"
        f"torch.cuda.stats[0]['allocated_bytes.all.current'] += {2 * GiB}\n"
        f"torch.cuda.stats[0]['allocated_bytes.all.peak'] = {before_peak + 6 * GiB}\n"
        f"torch.cuda.stats[0]['reserved_bytes.all.current'] += {4 * GiB}\n"
    )
    monkeypatch.setitem(nvml_process, "used_gpu_memory", nvml_process["used_gpu_memory"])
    ip.user_ns["_nvml_process"] = nvml_process
    _run(ip, code + f"_nvml_process['used_gpu_memory'] += {5 * GiB}")
    (gpu,) = _cells(ip)[-1]["gpus"]
    assert gpu["index"] == 0 and gpu["uuid"] == f"GPU-{UUID0}"
    assert gpu["allocated_bytes"] == before_alloc + 2 * GiB
    assert gpu["allocated_change_bytes"] == 2 * GiB
    assert gpu["peak_allocated_bytes"] == before_peak + 6 * GiB
    assert gpu["reserved_change_bytes"] == 4 * GiB
    assert gpu["process_change_bytes"] == 5 * GiB
    assert cuda.calls["memory_stats_as_nested_dict"] >= 2  # device 1 reserved nothing: not listed


def test_nvml_is_asked_at_most_once_a_second_and_followed_by_the_allocator_between(monkeypatch, nvml):
    """Listing processes costs too much for every edge of a short cell: the reserved bytes stand
    in between NVML readings, and memory taken outside the allocator shows at the next one."""
    clock = [1000.0]
    monkeypatch.setattr(timeline.time, "monotonic", lambda: clock[0])
    listed = []
    monkeypatch.setattr(nvml, "nvmlDeviceGetComputeRunningProcesses", _counting(nvml, listed))
    process = nvml.readings["devices"][0]["compute_processes"][0]
    memory = timeline.ProcessMemory()
    uuid = f"GPU-{UUID0}"
    first = memory.read(uuid, reserved=2 * GiB)
    assert first == process["used_gpu_memory"] and len(listed) == 1
    process["used_gpu_memory"] += 3 * GiB  # 1 GiB more reserved, 2 GiB outside the allocator
    clock[0] += 0.5
    assert memory.read(uuid, reserved=3 * GiB) == first + GiB and len(listed) == 1
    clock[0] += 0.6
    assert memory.read(uuid, reserved=3 * GiB) == first + 3 * GiB and len(listed) == 2


def _counting(nvml, listed: list):
    original = nvml.nvmlDeviceGetComputeRunningProcesses

    def listing(handle):
        listed.append(handle)
        return original(handle)

    return listing


def test_gpu_mem_cells_names_the_cells_that_hold_memory_and_the_peaks(ip, monkeypatch, nvml):
    cuda = FakeCuda()
    install(monkeypatch, cuda)
    _run(ip, "import torch")
    for n in (1, 4, 2):
        _run(ip, _allocate("allocated_bytes.all.current", n * GiB))
    with capture_output() as captured:
        ip.run_line_magic("gpu_mem", "--cells")
    text = captured.outputs[0].data["text/plain"]
    counts = [c["execution_count"] for c in _cells(ip)[-3:]]
    holders = text.split("Cells that left the most memory allocated")[1].split("Highest peaks")[0]
    order = [holders.index(f"cell [{counts[i]}]") for i in (1, 2, 0)]
    assert order == sorted(order), holders  # 4 GiB first, then 2, then 1
    assert f"cell [{counts[1]}]  +4.00 GiB" in holders
    assert "No cell raised the allocator's peak." in text  # the fake's peak never moved
    assert "<table>" in captured.outputs[0].data["text/html"]


def test_the_oom_explanation_names_the_cell_that_left_the_most(ip, monkeypatch, nvml):
    install(monkeypatch, FakeCuda())
    _run(ip, "import torch")
    _run(ip, _allocate("allocated_bytes.all.current", 30 * GiB))
    big = _cells(ip)[-1]["execution_count"]
    _run(ip, _allocate("allocated_bytes.all.current", 1 * GiB))
    out = _run(ip, f"raise torch.OutOfMemoryError({OOM_TEXT!r})")
    assert f"cell [{big}] left 30.0 GiB" in out
    assert out.index(f"cell [{big}] left 30.0 GiB") < out.index(f"cell [{big + 1}] left 1.00 GiB")
    assert _cells(ip)[-1]["outcome"] == "oom"


def test_the_kernel_keeps_the_last_1000_cells(ip):
    tl = timeline.timeline_of(ip)
    for _ in range(MAX_CELLS + 5):
        tl.pre_run_cell(None)
        tl.post_run_cell(None)
    cells = tl.cells()
    assert len(cells) == MAX_CELLS and cells[-1]["seq"] - cells[0]["seq"] == MAX_CELLS - 1


def test_the_file_keeps_the_newest_cells_that_fit(tmp_path, monkeypatch):
    tl = timeline.CellTimeline(tmp_path / cells_file_name(KERNEL_ID), KERNEL_ID)
    for _ in range(50):
        tl.pre_run_cell(None)
        tl.post_run_cell(None)
    whole = tl.document()
    monkeypatch.setattr(timeline, "MAX_BYTES", len(whole) // 2)
    tl.publish()
    data = tl.path.read_bytes()
    assert len(data) <= len(whole) // 2
    clean, reason = validate(json.loads(data), KERNEL_ID)
    assert reason is None and clean["cells"][-1]["seq"] == 49 and 0 < len(clean["cells"]) < 50
    assert oct(tl.path.stat().st_mode & 0o777) == "0o600"
    tl.stop()
    assert not tl.path.exists()
