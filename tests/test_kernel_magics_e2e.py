"""The magics in a real ipykernel (jupyter_client), importing the package from this source tree.

The tests share one kernel and run in file order: load, use, unload.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")
pytest.importorskip("torch")
from jupyter_client.manager import start_new_kernel  # noqa: E402
from support.kernel_client import run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def kernel():
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def test_load_ext_registers_the_magics_without_importing_torch(kernel):
    assert run(kernel, "%load_ext jupyter_gpu").ok
    cell = run(
        kernel,
        "import sys\n"
        "names = get_ipython().magics_manager.magics['line']\n"
        "print('torch' in sys.modules, sorted(n for n in ('amp', 'gpu_warmup', 'gpu_doctor') if n in names))",
    )
    assert cell.stream().strip() == "False ['amp', 'gpu_doctor', 'gpu_warmup']"


def test_amp_cell_applies_bf16_and_an_error_fails_the_cell(kernel):
    cell = run(
        kernel,
        "%%amp --device cpu --dtype bf16\nimport torch\n"
        "y = torch.ones(8, 8) @ torch.ones(8, 8)\nprint(y.dtype)",
    )
    assert cell.ok
    text = cell.stream()
    assert "torch.bfloat16" in text and "amp: bf16 autocast on cpu" in text
    cell = run(kernel, "%%amp --device cpu\nz = torch.ones(2, 2) @ torch.ones(2, 2)\n1 / 0")
    assert cell.status == "error" and cell.reply["ename"] == "ZeroDivisionError"
    cell = run(kernel, "print(torch.is_autocast_enabled('cpu'), z.dtype)")
    assert cell.stream().strip() == "False torch.bfloat16"


def test_amp_on_and_off_across_cells(kernel):
    matmul = "print((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)"
    assert "amp on: bf16 autocast on cpu" in run(kernel, "%amp on --device cpu").stream()
    assert run(kernel, matmul).stream().strip() == "torch.bfloat16"
    assert run(kernel, "raise ValueError('a failing cell')").status == "error"
    assert run(kernel, matmul).stream().strip() == "torch.bfloat16"
    run(kernel, "%amp off")
    assert run(kernel, matmul).stream().strip() == "torch.float32"


def test_bad_option_is_a_usage_error(kernel):
    cell = run(kernel, "%amp on --dtype fp8")
    assert cell.status == "error" and cell.reply["ename"] == "UsageError"
    assert "choose from 'bf16', 'fp16', 'auto'" in cell.reply["evalue"]


def test_doctor_shows_html_and_json_and_leaves_cuda_alone(kernel):
    cell = run(kernel, "%gpu_doctor --no-server")
    assert cell.ok
    shown = [m["content"]["data"] for m in cell.messages if m["msg_type"] == "display_data"]
    assert len(shown) == 1
    assert 'class="jupyter-gpu-doctor"' in shown[0]["text/html"]
    verdict = shown[0]["text/plain"].splitlines()[0]
    assert verdict.startswith(("No GPU: ", "CUDA ready: "))
    data = json.loads(run(kernel, "%gpu_doctor --json --no-server").stream())
    assert data["verdict"] == verdict and isinstance(data["checks"], list)
    cell = run(kernel, "print(torch.cuda.is_initialized())")
    assert cell.stream().strip() == "False"  # the doctor asked torch in a child process


def test_warmup_without_a_gpu_says_why(kernel):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert run(kernel, "%gpu_warmup").stream().startswith("gpu_warmup: nothing to warm. No GPU: ")


def test_unload_removes_magics_and_events(kernel):
    assert run(kernel, "%unload_ext jupyter_gpu").ok
    cell = run(kernel, "%amp")
    assert cell.status == "error" and "not found" in cell.reply["evalue"]
    cell = run(
        kernel,
        "callbacks = get_ipython().events.callbacks\n"
        "print([type(getattr(c, '__self__', None)).__name__ for e in ('pre_run_cell', 'post_run_cell')"
        " for c in callbacks[e] if type(getattr(c, '__self__', None)).__name__ == 'AmpMagics'])",
    )
    assert cell.stream().strip() == "[]"
