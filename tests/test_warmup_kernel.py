"""The warm-up in real kernels: ``c.KernelAgent.warmup = "background"`` starts nothing in a kernel
whose notebook never imports torch, and says why not where no GPU is usable; on a GPU, a cell
training while the background warm-up runs gets the CPU's answer and the warm-up finishes, and the
targeted warm-up of a CNN notebook runs only the steps that notebook needs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.kernel_client import RealKernel
from support.machine import HAS_GPU

no_gpu_here = pytest.mark.skipif(HAS_GPU, reason="describes a machine without a GPU")
WARMUP_THREADS = (
    "import sys, threading\n"
    "print('torch' in sys.modules, [t.name for t in threading.enumerate() if 'warmup' in t.name])"
)


@pytest.fixture
def kernel(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RealKernel]:
    """A kernel whose IPython profile says ``c.KernelAgent.warmup = "background"`` (or, with
    ``env``, whose environment does), the extension loaded."""
    env: dict[str, str] = getattr(request, "param", {})
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    if not env:
        (profile / "ipython_config.py").write_text('c.KernelAgent.warmup = "background"\n')
    kernel = RealKernel(tmp_path, IPYTHONDIR=str(tmp_path / "ipython"), **env)
    loaded = kernel.run("%load_ext jupyter_gpu")
    assert loaded.ok, loaded.traceback
    yield kernel
    kernel.close()


def test_a_notebook_that_never_imports_torch_starts_nothing(kernel: RealKernel) -> None:
    configured = kernel.run("from jupyter_gpu.kernel import agent\nprint(agent._running.warmup)")
    assert configured.stream() == "background\n", configured.shown  # the profile's setting holds
    assert kernel.run("x = [i * i for i in range(10)]").ok
    assert kernel.run(WARMUP_THREADS).stream().strip() == "False []"
    assert kernel.run("%gpu_warmup --status").stream() == "gpu_warmup: no background warm-up was started.\n"


@no_gpu_here
@pytest.mark.parametrize("kernel", [{"JUPYTER_GPU_WARMUP": "background"}], indirect=True)
def test_without_a_gpu_importing_torch_says_why_once_and_starts_nothing(kernel: RealKernel) -> None:
    imported = kernel.run("import torch")
    assert imported.ok, imported.traceback
    said = imported.stream().splitlines()
    assert len(said) == 1 and said[0].startswith("gpu_warmup: no background warm-up: No GPU: "), said
    assert kernel.run("y = torch.ones(2)").stream() == ""  # said once, not under every cell
    assert kernel.run(WARMUP_THREADS).stream().strip() == "True []"
    assert (
        kernel.run("%gpu_warmup --status").stream().startswith("gpu_warmup: no background warm-up: No GPU: ")
    )


# -- on a GPU (run on the H200 machine) -----------------------------------------------------------

TRAIN = """\
import torch
torch.manual_seed(0)
x, y = torch.randn(256, 32), torch.randint(0, 4, (256,))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
model, x, y = model.to(DEVICE), x.to(DEVICE), y.to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(50):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
final = loss.item()
"""


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", [{"JUPYTER_GPU_WARMUP": "background"}], indirect=True)
def test_a_cell_training_during_the_background_warmup_gets_the_cpus_answer(kernel: RealKernel) -> None:
    reference: dict = {"DEVICE": "cpu"}
    exec(TRAIN, reference)
    assert kernel.run("import torch").ok  # the notebook's first import of torch starts it
    trained = kernel.run("DEVICE = 'cuda'\n" + TRAIN + "print(final)")
    assert trained.ok, trained.traceback
    assert float(trained.stream()) == pytest.approx(reference["final"], rel=1e-4)
    waited = kernel.run("%gpu_warmup --wait --quiet")
    assert waited.stream().startswith("gpu_warmup: cuda:0 ") and " warm in " in waited.stream(), waited.shown
    status = kernel.run("%gpu_warmup --status").stream()
    assert "ended after" in status and "failed" not in status and "stopped" not in status, status
    # the warm-up's steps after the training cell left the seed it set as it was
    same = kernel.run(
        "a = torch.randn(4, device='cuda'); torch.manual_seed(0)\nprint(torch.equal(a, torch.randn(4, device='cuda')))"
    )
    assert same.stream().strip() == "True", same.shown


CNN_CELLS = (
    "import torch\nfrom torch import nn",
    "model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),\n"
    "                      nn.Flatten(), nn.Linear(32 * 16 * 16, 10)).cuda()\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)",
)


def write_notebook(path: Path, cells: tuple[str, ...]) -> None:
    import nbformat

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path.write_text(json.dumps(notebook))


@pytest.mark.gpu
def test_the_targeted_warmup_of_a_cnn_notebook_runs_only_its_steps(tmp_path: Path) -> None:
    notebook = tmp_path / "cnn.ipynb"
    write_notebook(notebook, CNN_CELLS)
    kernel = RealKernel(tmp_path, JPY_SESSION_NAME=str(notebook))
    try:
        assert kernel.run("%load_ext jupyter_gpu").ok
        shown = kernel.run("%gpu_warmup").shown
        later = kernel.run("%gpu_warmup --wait").shown  # the optimizers' steps, in the background
    finally:
        kernel.close()
    assert (
        "warming conv, norms, linear (8192x10), SGD in fp32: named in cnn.ipynb; --all for everything"
        in shown
    )
    for step in ("context", "matmul float32", "CNN training steps", "linear layers"):
        assert step in shown, shown
    assert "run in the background while you read" in shown and "optimizers:" not in shown
    assert "optimizers: SGD (foreach)" in later and "FAILED" not in later, later
    for other in ("transformer", "embedding", "attention", "GradScaler", "bfloat16", "float16", "FAILED"):
        assert other not in shown, shown
