"""The fuzzer's last tracebacks (issue #25), typed into a notebook: each is now one UsageError
line that says what is wrong, and nothing runs. On this CPU-only machine ``--device cuda`` meets
a real missing GPU, and the line must give the doctor's reason rather than a quiet CPU run."""

from __future__ import annotations

import psutil
import pytest
from IPython.testing import globalipapp
from support.usage_error import one_usage_error

from jupyter_gpu.doctor import no_gpu_reason
from jupyter_gpu.kernel import extension

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ip():
    globalipapp.start_ipython()
    shell = globalipapp.get_ipython()
    extension.load(shell)
    yield shell
    extension.unload(shell)


@pytest.fixture(scope="module")
def reason() -> str:
    """Why no GPU is usable here, as %gpu_doctor words it."""
    if torch.cuda.is_available():
        pytest.skip("CUDA works here: --device cuda is no error")
    said = no_gpu_reason()
    assert said
    return said


@pytest.mark.parametrize(
    "source",
    [
        "%ddp_start -n 1 --device cuda",
        "%%ddp_launch -n 1 --device cuda\nran = True",
        "%ddp_launch -n 1 --device cuda train.py",
        "%ddp_launch -n 2 --backend gloo --device cuda train.py",
        "%%amp --device cuda\nran = True",
        "%amp on --device cuda",
        "%ddp_load_local ckpt --device cuda",
        "state = %ddp_load_local ckpt --device cuda:1",
    ],
)
def test_device_cuda_without_a_gpu_says_why_and_runs_nothing(ip, capsys, reason, source):
    ip.user_ns.pop("ran", None)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    said = one_usage_error(ip, capsys, source)
    assert said.startswith("--device cuda") and reason in said and "%gpu_doctor" in said
    assert "ran" not in ip.user_ns and "state" not in ip.user_ns
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # no rank started


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("state = %ddp_load_local 'ckpt\x00/x'", r"ckpt\x00/x"),
        ("state = %ddp_load_local ckpt\x00 --model model", r"ckpt\x00"),
        ('state = %ddp_load_local "$newline_name"', r"ckpt\nx"),  # a name made in code
        ("%ddp_save ckpt\x00 --model model", r"ckpt\x00"),
        ("%ddp_load ckpt\x00 --model model", r"ckpt\x00"),
    ],
)
def test_a_checkpoint_path_with_a_control_character_is_one_line(ip, capsys, source, shown):
    ip.user_ns["newline_name"] = "ckpt\nx"
    said = one_usage_error(ip, capsys, source)
    assert said.startswith("argument path: ") and shown in said
    assert "control character" in said and "state" not in ip.user_ns
