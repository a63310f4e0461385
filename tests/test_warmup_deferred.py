"""``%gpu_warmup`` returns once CUDA is warm and leaves the optimizers' first steps (their
constructor's import of torch._dynamo: seconds of CPU, no CUDA) to the background, after its cell
(#32): with injected steps and a stand-in for torch (no GPU)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from support.ipython_shell import shell_with
from support.waiting import wait_until
from support.warmup_fakes import fake_cuda

from jupyter_gpu import warmup
from jupyter_gpu.kernel import warmup_background as background
from jupyter_gpu.kernel import warmup_magic

OPTIMIZER_STEP = "optimizers: Adam (foreach), first and later steps"
NEVER = 0.3  # seconds to watch for something that must not happen


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """A shell whose torch is the stand-in, and whose GPU is usable."""
    monkeypatch.setitem(sys.modules, "torch", fake_cuda())
    monkeypatch.setattr(warmup_magic, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(warmup, "_first_warmup_ms", {})
    for shell in shell_with(warmup_magic.register):
        # the shared shell's history: only this test's cells name what the warm-up chooses
        monkeypatch.setattr(shell.history_manager, "input_hist_raw", [""])
        yield shell
    background.end()


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Which step ran on which thread, the optimizers' as warmup_steps builds them when asked."""
    threads: dict[str, str] = {}

    def step(name: str):
        return name, lambda: threads.__setitem__(name, threading.current_thread().name)

    def steps_for(torch, index, choice, nccl, compile, optimizers=True):
        chosen = [step("context"), step("linear layers")]
        return chosen + (optimizer_steps(torch, index, choice) if optimizers else [])

    def optimizer_steps(torch, index, choice):
        return [step(OPTIMIZER_STEP)] if choice.optimizer_import else []

    monkeypatch.setattr(warmup.warmup_steps, "steps_for", steps_for)
    monkeypatch.setattr(warmup.warmup_steps, "optimizer_steps", optimizer_steps)
    return threads


def test_the_optimizers_warm_after_the_cell_and_a_wait_shows_them(shell, ran, capsys):
    shell.run_cell(
        "notebook = 'model = nn.Linear(784, 10); opt = torch.optim.Adam(model.parameters())'",
        store_history=True,
    )
    cell = shell.run_cell("%gpu_warmup")
    assert cell.success
    shown = capsys.readouterr().out
    assert "linear layers" in shown and OPTIMIZER_STEP not in shown
    assert "run in the background while you read" in shown
    runner = background.current()
    assert runner is not None
    wait_until("the optimizers' steps to run", lambda: not runner.running)
    assert ran["context"] == ran["linear layers"] == threading.main_thread().name
    assert ran[OPTIMIZER_STEP] == "gpu-warmup-background"
    shell.run_line_magic("gpu_warmup", "--wait")
    assert OPTIMIZER_STEP in capsys.readouterr().out


def test_a_cell_that_starts_meanwhile_waits_for_them(shell, ran, monkeypatch):
    """Started from its own cell, the background part waits for that cell to end; the next cell
    then waits for the step in flight: it never runs beside the import."""
    release = threading.Event()
    inner = warmup.warmup_steps.optimizer_steps
    monkeypatch.setattr(
        warmup.warmup_steps,
        "optimizer_steps",
        lambda *a: [(n, lambda action=action: (release.wait(30), action())) for n, action in inner(*a)],
    )
    shell.run_cell("notebook = 'opt = torch.optim.Adam(params)'", store_history=True)
    shell.run_cell("%gpu_warmup --quiet")
    runner = background.current()
    wait_until("the optimizers' step to start", lambda: "now: optimizers" in runner.status())
    threading.Timer(0.2, release.set).start()
    assert shell.run_cell("after = 1").success
    assert OPTIMIZER_STEP in ran  # the cell started only once the step in flight had ended


@pytest.mark.parametrize(
    ("cells", "option"),
    [
        ("notebook = 'model = nn.Linear(784, 10)'", ""),  # no optimizer named: nothing to defer
        ("notebook = 'opt = torch.optim.Adam(params)'", "--all"),  # everything, now, as asked
    ],
    ids=["no optimizer", "--all"],
)
def test_nothing_is_left_to_the_background_when(shell, ran, capsys, cells, option):
    shell.run_cell(cells, store_history=True)
    shell.run_cell(f"%gpu_warmup {option}")
    assert background.current() is None
    assert "in the background" not in capsys.readouterr().out
    assert (OPTIMIZER_STEP in ran) == (option == "--all")


def test_they_start_only_once_the_magics_cell_has_ended(shell, ran):
    shell.user_ns["ran"] = ran
    shell.run_cell("notebook = 'opt = torch.optim.Adam(params)'", store_history=True)
    cell = shell.run_cell(
        f"%gpu_warmup --quiet\nimport time\ntime.sleep({NEVER})\nduring = {OPTIMIZER_STEP!r} in ran"
    )
    assert cell.success and shell.user_ns["during"] is False
    wait_until("the optimizers' steps after the cell", lambda: OPTIMIZER_STEP in ran)


def test_a_later_call_waits_for_them_then_does_what_it_asks(shell, ran, monkeypatch, capsys):
    """The cell form's body runs (after the leftover steps), and --all is done, not swallowed."""
    release = threading.Event()
    order: list[str] = []
    inner = warmup.warmup_steps.optimizer_steps

    def gated(*args):
        def run(action):
            assert release.wait(30)
            action()
            order.append("optimizers")

        return [(name, lambda action=action: run(action)) for name, action in inner(*args)]

    monkeypatch.setattr(warmup.warmup_steps, "optimizer_steps", gated)
    shell.user_ns["order"] = order
    shell.run_cell("notebook = 'opt = torch.optim.Adam(params)'", store_history=True)
    shell.run_cell("%gpu_warmup --quiet")
    assert "run in the background while you read" in capsys.readouterr().out  # --quiet says so too
    threading.Timer(0.2, release.set).start()
    assert shell.run_cell("%%gpu_warmup --quiet\norder.append('body')").success
    assert order == ["optimizers", "body", "body"]  # the leftover first, then the cell cold and warm
    shell.run_line_magic("gpu_warmup", "--all --quiet")
    assert capsys.readouterr().out.count("gpu_warmup: cuda:0 Fake GPU warm in") == 1
    assert ran[OPTIMIZER_STEP] == threading.main_thread().name  # --all warmed them now, itself


def test_the_real_steps_leave_the_optimizers_out_when_asked(monkeypatch):
    import torch

    from jupyter_gpu.warmup_choice import choose

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))
    choice = choose({"nb": "model = nn.Linear(8, 4)\nopt = torch.optim.Adam(p)\nscaler = GradScaler()"})
    now = [
        name for name, _ in warmup.warmup_steps.steps_for(torch, 0, choice, False, False, optimizers=False)
    ]
    later = [name for name, _ in warmup.warmup_steps.optimizer_steps(torch, 0, choice)]
    every = [name for name, _ in warmup.warmup_steps.steps_for(torch, 0, choice, False, False)]
    assert later == [
        "optimizers: Adam (foreach), first and later steps (the first imports torch._dynamo)",
        "fp16 GradScaler step",
    ]
    assert not set(later) & set(now) and set(every) == set(now) | set(later)


@pytest.mark.parametrize("first", ["%gpu_warmup --quiet", "%gpu_warmup --background"])
def test_a_later_call_after_a_cell_cut_the_background_short_warms_again(
    shell, ran, monkeypatch, capsys, first
):
    """A cell that did not wait for the background's step in flight stops it; a plain call then
    waits for that step and warms, rather than showing the stopped one's report."""
    release, started = threading.Event(), threading.Event()
    slow = [(OPTIMIZER_STEP, lambda: (started.set(), release.wait(30)))]
    monkeypatch.setattr(warmup.warmup_steps, "optimizer_steps", lambda *args: slow)
    monkeypatch.setattr(
        warmup.warmup_steps,
        "steps_for",
        lambda torch, index, choice, nccl, compile, optimizers=True: (
            [("context", lambda: None)] + (slow if optimizers else [])
        ),
    )
    monkeypatch.setattr(background, "STEP_WAIT_S", 0.2)
    shell.run_cell("notebook = 'opt = torch.optim.Adam(params)'", store_history=True)
    shell.run_cell(first)
    assert started.wait(10)
    stopped = background.current()
    assert shell.run_cell("x = 1").success  # beside the step: the leftover stops after it
    assert stopped.stopping and "this cell runs beside" in capsys.readouterr().out
    threading.Timer(1.0, release.set).start()  # after this cell's own wait (STEP_WAIT_S) has given up
    shell.run_cell("%gpu_warmup --quiet")
    assert not stopped.running and "stopped early: a cell started" in " ".join(stopped.report.notes)
    assert background.current() is not stopped  # this call warmed and left its own optimizers
