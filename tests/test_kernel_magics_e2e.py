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


def run(client, code: str, timeout: float = 120) -> tuple[dict, list[dict]]:
    """Execute a cell; return the execute_reply content and the iopub messages it produced."""
    messages: list[dict] = []
    reply = client.execute_interactive(code, timeout=timeout, output_hook=messages.append)
    return reply["content"], messages


def stdout(messages: list[dict]) -> str:
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )


def test_load_ext_registers_the_magics_without_importing_torch(kernel):
    reply, _ = run(kernel, "%load_ext jupyter_gpu")
    assert reply["status"] == "ok"
    _, out = run(
        kernel,
        "import sys\n"
        "names = get_ipython().magics_manager.magics['line']\n"
        "print('torch' in sys.modules, sorted(n for n in ('amp', 'gpu_warmup', 'gpu_doctor') if n in names))",
    )
    assert stdout(out).strip() == "False ['amp', 'gpu_doctor', 'gpu_warmup']"


def test_amp_cell_applies_bf16_and_an_error_fails_the_cell(kernel):
    reply, out = run(
        kernel,
        "%%amp --device cpu --dtype bf16\nimport torch\n"
        "y = torch.ones(8, 8) @ torch.ones(8, 8)\nprint(y.dtype)",
    )
    assert reply["status"] == "ok"
    text = stdout(out)
    assert "torch.bfloat16" in text and "amp: bf16 autocast on cpu" in text
    reply, out = run(kernel, "%%amp --device cpu\nz = torch.ones(2, 2) @ torch.ones(2, 2)\n1 / 0")
    assert reply["status"] == "error" and reply["ename"] == "ZeroDivisionError"
    _, out = run(kernel, "print(torch.is_autocast_enabled('cpu'), z.dtype)")
    assert stdout(out).strip() == "False torch.bfloat16"


def test_amp_on_and_off_across_cells(kernel):
    matmul = "print((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)"
    assert "amp on: bf16 autocast on cpu" in stdout(run(kernel, "%amp on --device cpu")[1])
    assert stdout(run(kernel, matmul)[1]).strip() == "torch.bfloat16"
    reply, _ = run(kernel, "raise ValueError('a failing cell')")
    assert reply["status"] == "error"
    assert stdout(run(kernel, matmul)[1]).strip() == "torch.bfloat16"
    run(kernel, "%amp off")
    assert stdout(run(kernel, matmul)[1]).strip() == "torch.float32"


def test_bad_option_is_a_usage_error(kernel):
    reply, _ = run(kernel, "%amp on --dtype fp8")
    assert reply["status"] == "error" and reply["ename"] == "UsageError"
    assert "choose from 'bf16', 'fp16', 'auto'" in reply["evalue"]


def test_doctor_shows_html_and_json_and_leaves_cuda_alone(kernel):
    reply, out = run(kernel, "%gpu_doctor --no-server")
    assert reply["status"] == "ok"
    shown = [m["content"]["data"] for m in out if m["msg_type"] == "display_data"]
    assert len(shown) == 1
    assert 'class="jupyter-gpu-doctor"' in shown[0]["text/html"]
    verdict = shown[0]["text/plain"].splitlines()[0]
    assert verdict.startswith(("No GPU: ", "CUDA ready: "))
    _, out = run(kernel, "%gpu_doctor --json --no-server")
    data = json.loads(stdout(out))
    assert data["verdict"] == verdict and isinstance(data["checks"], list)
    _, out = run(kernel, "print(torch.cuda.is_initialized())")
    assert stdout(out).strip() == "False"  # the doctor asked torch in a child process


def test_warmup_without_a_gpu_says_why(kernel):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    _, out = run(kernel, "%gpu_warmup")
    assert stdout(out).startswith("gpu_warmup: nothing to warm. No GPU: ")


def test_unload_removes_magics_and_events(kernel):
    reply, _ = run(kernel, "%unload_ext jupyter_gpu")
    assert reply["status"] == "ok"
    reply, _ = run(kernel, "%amp")
    assert reply["status"] == "error" and "not found" in reply["evalue"]
    _, out = run(
        kernel,
        "callbacks = get_ipython().events.callbacks\n"
        "print([type(getattr(c, '__self__', None)).__name__ for e in ('pre_run_cell', 'post_run_cell')"
        " for c in callbacks[e] if type(getattr(c, '__self__', None)).__name__ == 'AmpMagics'])",
    )
    assert stdout(out).strip() == "[]"
