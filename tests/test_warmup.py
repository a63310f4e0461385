"""%gpu_warmup and %%gpu_warmup: options, reporting and the no-GPU path on the CPU; the effect on a GPU."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import types
from pathlib import Path

import pytest
from IPython.core.error import UsageError

torch = pytest.importorskip("torch")

from support.warmup_fakes import fake_cuda  # noqa: E402

from jupyter_gpu import warmup  # noqa: E402 -- only with torch present
from jupyter_gpu.kernel import warmup_magic  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_gpu_here = pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a GPU")


@pytest.fixture
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    undo = warmup_magic.register(shell)
    yield shell
    undo()


@no_gpu_here
def test_without_a_gpu_it_gives_the_doctors_verdict_and_does_nothing(ip, capsys):
    ip.run_line_magic("gpu_warmup", "")
    out = capsys.readouterr().out
    assert out.startswith("gpu_warmup: nothing to warm. No GPU: ")
    assert out.rstrip().endswith("Run %gpu_doctor for the fix.")
    assert len(out.strip().splitlines()) == 1
    ip.run_cell_magic("gpu_warmup", "", "ran_the_cell = True")
    assert "ran_the_cell" not in ip.user_ns


def test_repeat_must_be_positive(ip):
    with pytest.raises(UsageError, match="--repeat must be 1 or more"):
        ip.run_cell_magic("gpu_warmup", "--repeat 0", "pass")


@pytest.mark.parametrize(("text", "devices"), [(None, [1]), ("all", [0, 1]), ("1,0", [1, 0]), ("1, 1", [1])])
def test_devices_option(text, devices):
    assert warmup_magic._parse_devices(text, fake_cuda(current=1)) == devices


@pytest.mark.parametrize("text", ["2", "x", "-1", ","])
def test_bad_devices_name_the_valid_range(text):
    with pytest.raises(
        UsageError,
        match=r"give GPU indices from 0 to 1 separated by commas, or 'all' "
        r"\(this kernel sees 2 GPUs\)",
    ):
        warmup_magic._parse_devices(text, fake_cuda())


def test_each_step_is_timed_failures_are_shown_and_a_second_run_says_it_is_warm(monkeypatch):
    def boom():
        raise RuntimeError("no kernel image is available for execution on the device\nmore")

    monkeypatch.setattr(
        warmup.warmup_steps,
        "steps_for",
        lambda torch, index, choice, nccl, compile, optimizers: [
            ("context", lambda: None),
            ("matmul bf16 (cuBLAS)", boom),
            ("attention", lambda: None),
        ],
    )
    monkeypatch.setattr(warmup, "_first_warmup_ms", {})
    first = warmup.warm_device(fake_cuda(), 0)
    assert first.title == "cuda:0 Fake GPU"
    assert [s.name for s in first.steps] == ["context", "matmul bf16 (cuBLAS)", "attention"]
    assert first.steps[1].error == "RuntimeError: no kernel image is available for execution on the device"
    assert first.notes == ["allocator cache 64.0 MiB"]
    second = warmup.warm_device(fake_cuda(), 0)
    assert second.notes[-1].startswith("already warm: the first warm-up in this process took ")


def test_a_failed_context_stops_the_device(monkeypatch):
    def no_context():
        raise RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable")

    monkeypatch.setattr(
        warmup.warmup_steps, "steps_for", lambda *a: [("context", no_context), ("never", lambda: None)]
    )
    monkeypatch.setattr(warmup, "_first_warmup_ms", {})
    section = warmup.warm_device(fake_cuda(), 0)
    assert [s.name for s in section.steps] == ["context"] and section.steps[0].error


def test_fork_based_launchers_get_a_note(monkeypatch):
    monkeypatch.setattr(warmup, "warm_device", lambda torch, i, *options: warmup.Section(f"cuda:{i}"))
    monkeypatch.setitem(sys.modules, "accelerate", types.ModuleType("accelerate"))
    report = warmup.warm_up([0])
    assert "fork-based launchers (accelerate's notebook_launcher) will refuse to start" in report.notes[0]


def test_report_as_text_html_and_one_line():
    report = warmup.WarmupReport(
        [
            warmup.Section(
                "cuda:0 NVIDIA H200",
                [warmup.Step("context", 380.0), warmup.Step("conv2d", 2.5, "Boom: <x>")],
                ["allocator cache 42 MiB"],
            ),
            warmup.Section(
                "cell",
                [warmup.Step("first run (cold)", 340.0), warmup.Step("best of 1 warm run(s)", 2.0)],
                has_total=False,
            ),
        ]
    )
    text = str(report)
    assert "  context" in text and "380.0 ms" in text and "FAILED: Boom: <x>" in text
    assert "  total" in text and "382.5 ms" in text and text.count("total") == 1
    html = report.as_report().html()
    assert "<table>" in html and "Boom: &lt;x&gt;" in html
    assert report.summary() == (
        "gpu_warmup: cuda:0 NVIDIA H200 warm in 382 ms; "
        "cell: first run (cold) 340 ms, best of 1 warm run(s) 2 ms"
    )


def test_undo_removes_the_magic():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    undo = warmup_magic.register(shell)
    assert "gpu_warmup" in shell.magics_manager.magics["line"]
    undo()
    assert "gpu_warmup" not in shell.magics_manager.magics["line"]
    assert "gpu_warmup" not in shell.magics_manager.magics["cell"]


# -- on a GPU (run on the H200 machine) -----------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
def test_every_step_runs_and_the_second_call_says_it_was_warm(ip, capsys):
    loading = os.environ.get("CUDA_MODULE_LOADING")
    ip.run_line_magic("gpu_warmup", "--devices 0 --all")
    first = capsys.readouterr().out
    assert os.environ.get("CUDA_MODULE_LOADING") == loading  # never forced to EAGER
    assert "FAILED" not in first
    for step in (
        "context",
        "matmul float32",
        "scaled-dot-product attention",
        "optimizers: SGD, Adam, AdamW",
        "CNN training steps",
        "linear layers of common widths",
        "transformer encoder blocks",
        "batch, layer and group norms",
        "embeddings into a linear head",
    ):
        assert step in first
    report = warmup.warm_up([0])
    note = report.sections[0].notes[-1]
    # How much faster the second call is depends on what ran before in the process: measured in
    # benchmarks/warmup.py, not asserted here.
    assert re.fullmatch(r"already warm: the first warm-up in this process took [\d,]+ ms", note), note
    assert not [step for step in report.sections[0].steps if step.error], report.sections[0].steps


@pytest.mark.gpu
@needs_gpu
def test_the_optimizers_left_to_the_background_draw_nothing_from_the_notebooks_generators():
    """They run beside a cell that did not wait for them, with nothing restored afterwards: a seed
    the cell sets, and every number it draws after it, must be the same as without them."""
    from jupyter_gpu.warmup_choice import choose

    choice = choose({"nb": "opt = torch.optim.Adam(p)\nscaler = torch.amp.GradScaler()"})

    class CellBeside:  # the pacer of a background warm-up a cell did not wait for: nothing put back
        def before(self, step: str) -> bool:
            return True

        def settle(self, restore) -> None:
            pass

        def after(self, step) -> None:
            pass

    torch.manual_seed(1234)
    cpu, gpu = torch.get_rng_state(), torch.cuda.get_rng_state(0)
    report = warmup.warm_optimizers([0], choice, CellBeside())
    assert [s.name for s in report.sections[0].steps if not s.error] == [
        "optimizers: Adam (foreach), first and later steps (the first imports torch._dynamo)",
        "fp16 GradScaler step",
    ]
    assert torch.equal(torch.get_rng_state(), cpu) and torch.equal(torch.cuda.get_rng_state(0), gpu)


@pytest.mark.gpu
@needs_gpu
def test_cell_form_reports_cold_and_warm_runs(ip, capsys):
    ip.user_ns["torch"] = torch
    ip.run_cell_magic(
        "gpu_warmup", "--quiet --repeat 2", "y = torch.nn.functional.gelu(torch.ones(64, device='cuda'))"
    )
    out = capsys.readouterr().out
    assert out.startswith("gpu_warmup: cell: first run (cold) ") and "best of 2 warm run(s)" in out
    assert ip.user_ns["y"].is_cuda


@pytest.mark.gpu
@needs_gpu
def test_bad_device_index_on_a_gpu_machine(ip):
    with pytest.raises(UsageError, match="this kernel sees"):
        ip.run_line_magic("gpu_warmup", f"--devices {torch.cuda.device_count()}")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.timeout(1200)
def test_after_warmup_the_first_step_is_within_10x_of_steady_in_fresh_kernels():
    """Issue #17's three models in fresh kernels, arms interleaved (benchmarks/warmup.py): a small
    CNN with SGD, a transformer block with AdamW under bf16 autocast, an MLP with Adam."""
    pytest.importorskip("jupyter_client")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "warmup.py"),
            *("--trials", "2", "--steps", "20", "--arms", "cold,targeted", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=1150,
        check=True,
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    for workload, arms in results.items():
        cold, warm = arms["cold"], arms["after %gpu_warmup"]
        first, steady = statistics.median(warm["first_ms"]), statistics.median(warm["steady_ms"])
        assert first <= 10 * steady, f"{workload}: first step {first:.1f} ms, steady {steady:.2f} ms"
        assert first < statistics.median(cold["first_ms"]), workload
        assert statistics.median(warm["warmup_ms"]) < 12_000, f"{workload}: the warm-up took too long"
