"""`%load_ext jupyter_gpu` in a real ipykernel: every magic it adds works (here, without a GPU),
tracebacks name the cell as the notebook shows it, and `%unload_ext jupyter_gpu` takes every
magic, event callback, thread and file back. The tests share one kernel and run in file order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.kernel_client import RealKernel
from support.waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
READINGS = REPO / "tests" / "fixtures" / "nvml_readings_2gpu.json"
# The magics of the docs' guide (docs/guide/magics.md, planning.md, multi-gpu.md), as IPython registers them.
MAGICS = {
    "line": [
        "amp",
        "ddp_launch",
        "ddp_load",
        "ddp_load_local",
        "ddp_pull",
        "ddp_push",
        "ddp_restart",
        "ddp_save",
        "ddp_start",
        "ddp_status",
        "ddp_stop",
        "gpu_doctor",
        "gpu_mem",
        "gpu_monitor",
        "gpu_plan",
        "gpu_warmup",
    ],
    "cell": ["amp", "ddp", "ddp_launch", "gpu_profile", "gpu_warmup"],
}
SHELL_STATE = """import json, sys, threading
_ip = get_ipython()
print(json.dumps({"magics": {kind: sorted(table) for kind, table in _ip.magics_manager.magics.items()},
                  "callbacks": {event: len(cbs) for event, cbs in _ip.events.callbacks.items()},
                  "threads": sorted(t.name for t in threading.enumerate()),
                  "torch": "torch" in sys.modules}))
"""


def shell_state(kernel: RealKernel) -> dict[str, Any]:
    """The shell's magics, event callbacks, threads and whether torch is imported."""
    cell = kernel.run(SHELL_STATE)
    assert cell.ok, cell.shown
    return json.loads(cell.stream())


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealKernel]:
    kernel = RealKernel(tmp_path_factory.mktemp("runtime"))
    yield kernel
    kernel.close()


@pytest.fixture(scope="module")
def before_load(kernel: RealKernel) -> dict[str, Any]:
    """The shell as it was before jupyter_gpu was loaded."""
    return shell_state(kernel)


def _added(state: dict[str, Any], before: dict[str, Any]) -> dict[str, list[str]]:
    return {kind: sorted(set(names) - set(before["magics"][kind])) for kind, names in state["magics"].items()}


def test_load_ext_adds_every_magic_and_imports_no_torch(kernel: RealKernel, before_load: dict) -> None:
    cell = kernel.run("%load_ext jupyter_gpu")
    assert cell.ok and cell.shown == ""
    state = shell_state(kernel)
    assert _added(state, before_load) == MAGICS
    assert state["torch"] is False


def test_the_agent_publishes_this_kernel(kernel: RealKernel) -> None:
    wait_until("the agent's stats file appears", kernel.stats_file.exists)
    doc = json.loads(kernel.stats_file.read_text())
    assert doc["kernel_id"] == kernel.kernel_id and doc["pid"] == kernel.km.provisioner.pid
    assert doc["cuda_in_use"] is False


@pytest.mark.parametrize(
    "code, expected",
    [
        ("%gpu_doctor --json", '"verdict": "No GPU: '),
        ("%gpu_mem", "This kernel has not initialised CUDA, so it holds no GPU memory."),
        ("%gpu_warmup", "gpu_warmup: nothing to warm. No GPU: "),
        ("%%gpu_warmup\nx = 1\n", "gpu_warmup: nothing to warm. No GPU: "),
        ("%gpu_monitor", "gpu_monitor: no GPU to monitor."),
        (
            "%%amp --device cpu --dtype bf16\nimport torch\nprint((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)\n",
            "torch.bfloat16\n",
        ),
        (
            "import torch\nraise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')",
            "jupyter_gpu: why CUDA ran out of memory\n  Asked for 2.00 GiB.",
        ),
        (
            "%%ddp_launch -n 2 --output all\nx = torch.ones(1)\ndist.all_reduce(x)\nprint(RANK, x.item())\n",
            "[rank 0] 0 2.0\n",
        ),
    ],
)
def test_each_magic_works_without_a_gpu(kernel: RealKernel, code: str, expected: str) -> None:
    cell = kernel.run(code)
    assert expected in cell.shown, cell.shown


def test_amp_on_applies_to_every_following_cell_until_off(kernel: RealKernel) -> None:
    matmul = "print((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)"
    assert kernel.run("%amp on --device cpu --dtype bf16").ok
    assert kernel.run(matmul).stream() == "torch.bfloat16\n"
    assert kernel.run("%amp").stream() == "amp is on: bf16 autocast on cpu\n"
    assert kernel.run("%amp off").ok
    assert kernel.run(matmul).stream() == "torch.float32\n"


def test_persistent_ranks_keep_their_variables(kernel: RealKernel) -> None:
    cell = kernel.run("%ddp_start -n 2")
    assert cell.stream().startswith("2 ranks ready (gloo on cpu)"), cell.shown
    kernel.run("base = 10")
    assert kernel.run("%ddp_push base").ok
    assert kernel.run("%%ddp\nkept = base + RANK\n").ok
    assert kernel.run("pulled = %ddp_pull kept\nprint(pulled)").stream() == "{0: 10, 1: 11}\n"
    assert "rank 1" in kernel.run("%ddp_status").stream()
    assert kernel.run("%ddp_restart").stream() == "2 ranks ready\n"
    assert "NameError" in kernel.run("%%ddp\nprint(kept)\n").shown  # fresh ranks
    assert kernel.run("%ddp_stop").ok


@pytest.mark.parametrize(
    "code",
    [
        "%%amp --device cpu\nx = 1\n1 / 0\n",
        "%%ddp_launch -n 1\nx = 1\n1 / 0\n",
    ],
)
def test_a_cell_magic_traceback_names_the_cell_as_the_notebook_shows_it(
    kernel: RealKernel, code: str
) -> None:
    cell = kernel.run(code)
    assert not cell.ok
    shown = set(re.findall(r"Cell In\[(\d+)\], line 3", cell.shown))
    assert shown == {str(cell.number)}, cell.shown


def test_unload_ext_takes_everything_back(kernel: RealKernel, before_load: dict) -> None:
    monitor = kernel.run(  # a monitor thread over replayed H200 readings, to be stopped by unload
        "from jupyter_gpu.kernel import gpu_memory\nfrom jupyter_gpu.nvml.simulated import SimulatedNVML\n"
        f"gpu_memory.nvml_backend = lambda: SimulatedNVML.from_file({str(READINGS)!r})\n"
        "%gpu_monitor --interval 0.5"
    )
    assert monitor.ok, monitor.shown
    assert "jupyter_gpu-monitor" in shell_state(kernel)["threads"]

    assert kernel.run("%unload_ext jupyter_gpu").ok
    state = shell_state(kernel)
    assert _added(state, before_load) == {"line": [], "cell": []}
    assert state["callbacks"] == before_load["callbacks"]
    assert not kernel.stats_file.exists()
    wait_until(
        "the jupyter_gpu threads end",
        lambda: not {"jupyter_gpu-agent", "jupyter_gpu-monitor"} & set(shell_state(kernel)["threads"]),
    )
    cell = kernel.run("%gpu_mem")
    assert cell.stream("stderr").startswith("UsageError: Line magic function `%gpu_mem` not found")
    oom = kernel.run("raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')")
    assert "why CUDA ran out of memory" not in oom.shown


def test_load_ext_again_after_unload(kernel: RealKernel, before_load: dict) -> None:
    assert kernel.run("%load_ext jupyter_gpu").ok
    assert _added(shell_state(kernel), before_load) == MAGICS
    assert "has not initialised CUDA" in kernel.run("%gpu_mem").shown
    wait_until("the agent publishes again", kernel.stats_file.exists)
