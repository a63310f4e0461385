"""Every notebook in examples/ runs top to bottom in a real kernel (nbclient), as a workshop
participant would run it: on the CPU here, saying so, and on GPUs in the gpu-marked variant.
Beyond "no errors", each notebook's check looks for the outputs that make it worth reading."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from support.machine import HAS_GPU

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def execute(path: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    )
    client.execute(env=ENV)
    return notebook


def text(cell: nbformat.NotebookNode) -> str:
    """Everything a cell showed: streams, plain text and HTML of results, and errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts += [str(out.data.get(kind, "")) for kind in ("text/plain", "text/html")]
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "\n".join(parts)


def cell(notebook: nbformat.NotebookNode, start: str, nth: int = 0) -> nbformat.NotebookNode:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(start)][nth]


def check_quickstart(nb: nbformat.NotebookNode, gpu: bool) -> None:
    assert ("CUDA ready: " if gpu else "No GPU: ") in text(cell(nb, "%gpu_doctor"))
    assert ("training on NVIDIA" if gpu else "No GPU here: this notebook runs on the CPU") in text(
        cell(nb, "import torch")
    )
    warm = text(cell(nb, "%gpu_warmup"))
    assert (
        ("cuda:0" in warm and "total" in warm)
        if gpu
        else warm.startswith("gpu_warmup: nothing to warm. No GPU: ")
    )
    amp = text(cell(nb, "%%amp"))
    assert (
        f"amp: bf16 autocast on {'cuda' if gpu else 'cpu'}" in amp and "the logits are torch.bfloat16" in amp
    )
    memory = text(cell(nb, "%gpu_mem"))
    assert ("PyTorch allocator (this kernel)" in memory) if gpu else ("has not initialised CUDA" in memory)
    monitor = cell(nb, "%gpu_monitor")
    if gpu:
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in monitor.outputs)
    else:
        assert text(monitor).startswith("gpu_monitor: no GPU to monitor. ")
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", amp).groups())
    assert last < first, "the %%amp training loop did not learn"


def check_multi_gpu(nb: nbformat.NotebookNode, gpu: bool) -> None:
    where = "cuda (nccl)" if gpu else "cpu (gloo)"
    assert f"2 ranks on {where}: loss" in text(cell(nb, "%%ddp_launch"))
    assert "the same weights on all 2 ranks" in text(cell(nb, "print(_ddp)"))
    assert text(cell(nb, "%ddp_start")).startswith(
        f"2 ranks ready ({'nccl on cuda' if gpu else 'gloo on cpu'})"
    )
    assert "rank 0 of 2 ready on" in text(cell(nb, "%%ddp\n"))
    first, second = (text(cell(nb, "%%ddp --return", i)) for i in (0, 1))
    losses = [float(re.search(r"after (?:10|20) steps: loss ([\d.]+)", t).group(1)) for t in (first, second)]
    assert "after 10 steps" in first and "after 20 steps" in second and losses[1] < losses[0]
    assert "{0: 20, 1: 20}" in text(cell(nb, 'print("loss per rank'))


def check_fsdp(nb: nbformat.NotebookNode, gpu: bool) -> None:
    sizes = text(cell(nb, "%load_ext"))
    budget_passed = re.search(
        r"needs (\d+) MiB per rank, the budget is (\d+) MiB; sharded over 2 ranks (\d+) MiB", sizes
    )
    assert budget_passed, sizes
    unsharded, budget, sharded = map(int, budget_passed.groups())
    assert gpu or unsharded > budget > sharded  # scaled down on the CPU, the point still made
    started = text(cell(nb, "%ddp_start"))
    assert "`mesh` and `shard(model)` are bound for FSDP2" in started
    assert ("nccl on cuda" if gpu else "gloo on cpu") in started
    shard = text(cell(nb, "%%ddp\nimport warnings"))
    assert "layers (Block) and the root over 2 ranks" in shard and "built from the meta device" in shard
    assert "Traceback" not in shard and "Warning" not in shard
    first, resumed = (text(cell(nb, "%%ddp --return", i)) for i in (0, 1))
    loss = [float(re.search(r"after (?:30|40) steps: loss ([\d.]+)", t).group(1)) for t in (first, resumed)]
    halves = re.findall(r"rank \d: parameters ([\d.]+ \w+) of ([\d.]+ \w+)", first)
    assert len(halves) == 2 and all(mine != whole for mine, whole in halves), first
    assert "Saved model 'model' and optimizer 'opt' from 2 ranks to " in text(cell(nb, "%ddp_save"))
    assert "on 2 ranks from " in text(cell(nb, "%ddp_load ")) and "(saved from 2 ranks)" in text(
        cell(nb, "%ddp_load ")
    )
    # a fresh model would start near ln(256) = 5.5: the resumed run starts where the saved one was
    assert loss[0] < 2.5 and abs(loss[1] - loss[0]) < 0.5, loss
    assert "into local" in text(cell(nb, "%ddp_load_local"))
    evaluated = float(
        re.search(r"in the kernel: loss ([\d.]+)", text(cell(nb, "with torch.no_grad()"))).group(1)
    )
    assert abs(evaluated - loss[1]) < 0.5


def check_out_of_memory(nb: nbformat.NotebookNode, gpu: bool) -> None:
    fill = cell(nb, "blocks = []")
    if gpu:
        [error] = [o for o in fill.outputs if o.output_type == "error"]
        assert error.ename == "OutOfMemoryError"
        explanation = text(fill)
        assert (
            "jupyter_gpu: why CUDA ran out of memory on GPU 0" in explanation
            and "This kernel: " in explanation
        )
        assert "PyTorch allocator (this kernel)" in text(cell(nb, "%gpu_mem"))
        assert "free again: " in text(cell(nb, "import gc"))
    else:
        assert text(fill).startswith("No GPU: nothing to fill.")
        recorded = text(cell(nb, "from jupyter_gpu.kernel.oom import explain"))
        assert "jupyter_gpu: why CUDA ran out of memory on GPU 0" in recorded
        assert "Asked for 2.00 GiB; the GPU had 1.00 GiB free of 140 GiB." in recorded
        assert "has not initialised CUDA" in text(cell(nb, "%gpu_mem"))


def check_demo(nb: nbformat.NotebookNode, gpu: bool) -> None:
    assert f"training on {'cuda' if gpu else 'cpu'}" in text(cell(nb, "import torch"))
    assert "amp: " in text(cell(nb, "%%amp")) and "loss" in text(cell(nb, "%%amp"))


CHECKS: dict[str, Callable[[nbformat.NotebookNode, bool], None]] = {
    "quickstart.ipynb": check_quickstart,
    "multi_gpu.ipynb": check_multi_gpu,
    "fsdp.ipynb": check_fsdp,
    "out_of_memory.ipynb": check_out_of_memory,
    "demo.ipynb": check_demo,
}


def run_and_check(path: Path, gpu: bool) -> None:
    assert path.name in CHECKS, f"{path.name} has no check in {__name__}.CHECKS"
    notebook = execute(path)  # raises CellExecutionError on an error in a cell not tagged raises-exception
    shown = "\n".join(text(c) for c in notebook.cells if c.cell_type == "code")
    assert "Failed to initialize NumPy" not in shown, "torch found no numpy (the kernel extra brings it)"
    CHECKS[path.name](notebook, gpu)


@pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the gpu-marked variant runs the notebooks")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_example_runs_on_the_cpu_and_says_so(path: Path) -> None:
    run_and_check(path, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_example_runs_on_gpus(path: Path) -> None:
    gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
    if path.name == "multi_gpu.ipynb" and len(gpus) < 2:
        pytest.skip("the notebook's -n 2 needs two GPUs")
    # with one GPU the FSDP notebook puts its two ranks on the CPU: the one-GPU laptop's path
    run_and_check(path, gpu=path.name != "fsdp.ipynb" or len(gpus) >= 2)
