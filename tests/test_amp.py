"""%%amp and %amp on|off in a real IPython shell, on the CPU build of torch (GPU tests marked)."""

from __future__ import annotations

import threading
import warnings

import pytest
from IPython.core.error import UsageError

torch = pytest.importorskip("torch")

from jupyter_gpu.kernel import amp  # noqa: E402 -- only with torch present

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def fresh_resolution():
    """Tests fake what torch supports; resolve() caches per process, so forget between tests."""
    amp.resolve.cache_clear()
    yield
    amp.resolve.cache_clear()


@pytest.fixture
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    names = set(shell.user_ns)
    undo = amp.register(shell)
    shell.user_ns.update(torch=torch, a=torch.ones(4, 4), b=torch.ones(4, 4))
    yield shell
    undo()
    for name in set(shell.user_ns) - names:
        del shell.user_ns[name]


def autocast_on() -> bool:
    return torch.is_autocast_enabled("cpu")


def test_cell_runs_under_bf16_autocast(ip, capsys):
    result = ip.run_cell("%%amp --device cpu --dtype bf16\ny = a @ b\ny.dtype")
    assert result.success
    assert ip.user_ns["y"].dtype == torch.bfloat16
    assert result.result == torch.bfloat16  # the last expression is the cell's value
    assert not autocast_on()
    assert "amp: bf16 autocast on cpu, " in capsys.readouterr().out


def test_auto_dtype_on_cpu_is_bf16(ip):
    ip.run_cell("%%amp --device cpu\ny = a @ b")
    assert ip.user_ns["y"].dtype == torch.bfloat16


def test_fp16_on_cpu_follows_torchs_support(ip):
    if amp._autocast_refusal(torch, "cpu", "fp16") is None:
        ip.run_cell("%%amp --device cpu --dtype fp16\ny = a @ b")
        assert ip.user_ns["y"].dtype == torch.float16
    else:
        with pytest.raises(UsageError, match="Valid here: --dtype bf16"):
            ip.run_cell_magic("amp", "--device cpu --dtype fp16", "y = a @ b")


def test_a_torch_that_cannot_autocast_fp16_on_cpu_gets_a_clear_error(ip, monkeypatch):
    real = torch.amp.autocast

    def old_torch_autocast(device_type, dtype=None, **kwargs):  # how torch < 2.1 behaved
        if device_type == "cpu" and dtype == torch.float16:
            warnings.warn(
                "In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                "CPU Autocast only supports dtype of torch.bfloat16 currently.",
                stacklevel=2,
            )
        return real(device_type, dtype=dtype, **kwargs)

    monkeypatch.setattr(torch.amp, "autocast", old_torch_autocast)
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("amp", "--device cpu --dtype fp16", "y = a @ b")
    assert str(raised.value) == (
        "--dtype fp16 on cpu: In CPU autocast, but the target dtype is not supported. "
        "Disabling autocast. Valid here: --dtype bf16."
    )
    assert "y" not in ip.user_ns


def test_error_in_cell_propagates_and_leaves_autocast(ip):
    result = ip.run_cell("%%amp --device cpu\nz = a @ b\n1 / 0")
    assert isinstance(result.error_in_exec, ZeroDivisionError)  # the outer cell fails: "Run all" stops
    assert ip.user_ns["z"].dtype == torch.bfloat16
    assert not autocast_on()
    assert torch.get_autocast_dtype("cpu") == torch.bfloat16  # torch's default, untouched


def test_traceback_shows_the_notebook_cells_line_numbers(ip, capsys):
    ip.run_cell("%%amp --device cpu\nx = 1\nundefined_name")
    out = capsys.readouterr().out
    assert "----> 3 undefined_name" in out


def test_amp_on_applies_to_following_cells_and_off_stops(ip, capsys):
    ip.run_cell("%amp on --device cpu --dtype bf16")
    assert not autocast_on()  # only while a cell runs
    ip.run_cell("y1 = a @ b")
    ip.run_cell("raise ValueError('boom')")
    assert not autocast_on()
    ip.run_cell("y2 = a @ b")
    ip.run_cell("%amp")
    ip.run_cell("%amp off\ny3 = a @ b")
    ip.run_cell("y4 = a @ b")
    assert [ip.user_ns[n].dtype for n in ("y1", "y2", "y3", "y4")] == [torch.bfloat16] * 2 + [
        torch.float32
    ] * 2
    out = capsys.readouterr().out
    assert "amp on: bf16 autocast on cpu for every cell until %amp off" in out
    assert "amp is on: bf16 autocast on cpu" in out and "amp off" in out


def test_amp_on_covers_the_rest_of_its_own_cell(ip):
    ip.run_cell("%amp on --device cpu\ny = a @ b")
    assert ip.user_ns["y"].dtype == torch.bfloat16
    ip.run_cell("%amp off")


def test_status_when_off(ip, capsys):
    ip.run_line_magic("amp", "")
    assert capsys.readouterr().out == "amp is off\n"


def test_scopes_belong_to_the_thread_that_runs_the_cell(ip):
    """ipykernel subshells run cells in other threads; autocast state is per thread."""
    magics = ip.magics_manager.registry["AmpMagics"]
    magics.persistent = amp.AmpSettings("cpu", "bf16")
    seen = {}

    def cell_in_other_thread():
        magics.pre_run_cell()
        seen["inside"] = torch.is_autocast_enabled("cpu")
        magics.post_run_cell()
        seen["after"] = torch.is_autocast_enabled("cpu")

    thread = threading.Thread(target=cell_in_other_thread)
    thread.start()
    thread.join()
    magics.persistent = None
    assert seen == {"inside": True, "after": False}
    assert not autocast_on()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("on --dtype fp8", "argument --dtype: invalid choice: 'fp8' (choose from 'bf16', 'fp16', 'auto')"),
        ("on --device tpu", "argument --device: invalid choice: 'tpu' (choose from 'cuda', 'cpu', 'auto')"),
        ("maybe", "argument state: invalid choice: 'maybe' (choose from 'on', 'off')"),
        ("--dtype bf16", "Options go with 'on'"),
        ("on --device cpu --tf32 on", "--tf32 applies to CUDA"),
    ],
)
def test_bad_options_are_usage_errors_naming_the_choices(ip, line, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ip.run_line_magic("amp", line)


def test_cell_form_takes_no_state(ip):
    with pytest.raises(UsageError, match="%%amp takes no 'on'"):
        ip.run_cell_magic("amp", "on", "y = a @ b")


def test_cuda_without_cuda_is_a_usage_error(ip):
    if torch.cuda.is_available():
        pytest.skip("CUDA works here")
    with pytest.raises(UsageError, match="Valid here: --device cpu or --device auto"):
        ip.run_cell_magic("amp", "--device cuda", "y = a @ b")


def test_grad_scaler_persists_and_scales_only_fp16(ip):
    ip.run_cell("%%amp --device cpu --dtype bf16\ns1 = amp_scaler")
    ip.run_cell("%%amp --device cpu --dtype bf16\ns2 = amp_scaler")
    s1, s2 = ip.user_ns["s1"], ip.user_ns["s2"]
    assert s1 is s2 and isinstance(s1, torch.amp.GradScaler) and not s1.is_enabled()
    if amp._autocast_refusal(torch, "cpu", "fp16") is None:
        ip.run_cell("%%amp --device cpu --dtype fp16\ns3 = amp_scaler")
        assert ip.user_ns["s3"].is_enabled()


def test_a_users_own_amp_scaler_is_left_alone(ip):
    ip.user_ns[amp.SCALER_NAME] = "mine"
    ip.run_cell("%%amp --device cpu\ny = a @ b")
    assert ip.user_ns[amp.SCALER_NAME] == "mine"


def test_tf32_scope_restores_precision():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    with amp.amp_scope(amp.AmpSettings("cpu", "bf16", tf32=True)):
        assert torch.get_float32_matmul_precision() == "high"
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before


def test_undo_leaves_no_magics_events_or_state():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    magics_before = {k: set(v) for k, v in shell.magics_manager.magics.items()}
    events_before = {k: list(v) for k, v in shell.events.callbacks.items()}
    undo = amp.register(shell)
    assert "amp" in shell.magics_manager.magics["cell"]
    shell.run_cell("%amp on --device cpu")
    shell.events.trigger("pre_run_cell", None)  # as if a cell were running while unloading
    assert torch.is_autocast_enabled("cpu")
    undo()
    assert not torch.is_autocast_enabled("cpu")
    assert amp.SCALER_NAME not in shell.user_ns
    assert {k: set(v) for k, v in shell.magics_manager.magics.items()} == magics_before
    assert {k: list(v) for k, v in shell.events.callbacks.items()} == events_before
    assert "AmpMagics" not in shell.magics_manager.registry


# -- on a GPU (run on the H200 machine) -----------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
def test_bf16_on_cuda(ip, capsys):
    ip.user_ns.update(a=torch.ones(64, 64, device="cuda"), b=torch.ones(64, 64, device="cuda"))
    ip.run_cell("%%amp --device cuda --dtype bf16\ny = a @ b")
    y = ip.user_ns["y"]
    assert y.dtype == torch.bfloat16 and y.is_cuda
    assert not torch.is_autocast_enabled("cuda")
    out = capsys.readouterr().out
    assert "amp: bf16 autocast on cuda" in out and "peak" in out


@pytest.mark.gpu
@needs_gpu
def test_auto_picks_bf16_on_ampere_or_newer_and_tf32_is_scoped(ip):
    ip.user_ns.update(a=torch.ones(64, 64, device="cuda"), b=torch.ones(64, 64, device="cuda"))
    ip.run_cell("%%amp --tf32 on\ny = a @ b\nprecision = torch.get_float32_matmul_precision()")
    expected = torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16
    assert ip.user_ns["y"].dtype == expected
    assert ip.user_ns["precision"] == "high"
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.gpu
@needs_gpu
def test_amp_on_across_cells_on_cuda(ip):
    ip.user_ns.update(a=torch.ones(64, 64, device="cuda"), b=torch.ones(64, 64, device="cuda"))
    ip.run_cell("%amp on --device cuda --dtype fp16")
    ip.run_cell("y = a @ b")
    ip.run_cell("%amp off")
    ip.run_cell("z = a @ b")
    assert (ip.user_ns["y"].dtype, ip.user_ns["z"].dtype) == (torch.float16, torch.float32)
    assert ip.user_ns[amp.SCALER_NAME].is_enabled()  # fp16 needs loss scaling


def test_a_training_loop_inside_one_amp_cell_learns(ip):
    """autocast's weight-cast cache would pin the first step's bf16 weights for the whole cell."""
    ip.run_cell(
        "torch.manual_seed(0)\n"
        "net = torch.nn.Linear(16, 1)\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "xs, ys = torch.randn(64, 16), torch.randn(64, 1)\n"
        "losses = []"
    )
    result = ip.run_cell(
        "%%amp --device cpu --dtype bf16\n"
        "for _ in range(30):\n"
        "    loss = torch.nn.functional.mse_loss(net(xs).float(), ys)\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    losses.append(loss.item())"
    )
    assert result.success
    losses = ip.user_ns["losses"]
    assert losses[-1] < 0.8 * losses[0]
