"""The background warm-up's scheduling, with injected steps (no GPU): a cell that starts waits for
the step in flight and no step runs until the cell ends; a cell that waits for the warm-up lets it
run; failures are kept in its report, never printed by the thread; unloading stops it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support.ipython_shell import shell_with
from support.waiting import wait_until
from support.warmup_fakes import fake_cuda

from jupyter_gpu import warmup
from jupyter_gpu.kernel import warmup_background as background
from jupyter_gpu.kernel import warmup_magic
from jupyter_gpu.warmup_choice import Choice

NEVER = 0.3  # seconds to watch for something that must not happen


@pytest.fixture
def shell() -> Iterator:
    yield from shell_with(warmup_magic.register)
    background.end()


class Steps:
    """Injected warm-up steps: ``slow`` runs until released; each records that it started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *names: str, fail: str | None = None) -> None:
        self.started: dict[str, threading.Event] = {n: threading.Event() for n in names}
        self.release = threading.Event()
        self.fail = fail
        monkeypatch.setattr(
            warmup.warmup_steps, "steps_for", lambda *args: [(n, self._action(n)) for n in names]
        )

    def _action(self, name: str) -> Callable[[], None]:
        def run() -> None:
            self.started[name].set()
            if name == "slow":
                assert self.release.wait(30), "the test never released the slow step"
            if name == self.fail:
                raise RuntimeError("no kernel image is available for execution on the device")

        return run


def work(pacer: warmup.Pacer | None) -> warmup.WarmupReport:
    return warmup.WarmupReport([warmup.warm_device(fake_cuda(), 0, Choice(), pacer=pacer)])


def in_thread(call: Callable[[], object]) -> threading.Event:
    """Run ``call`` on a thread of its own (as the kernel's main thread would); set when it returns."""
    returned = threading.Event()
    threading.Thread(target=lambda: (call(), returned.set()), daemon=True).start()
    return returned


def test_a_cell_waits_for_the_step_in_flight_then_the_warmup_waits_for_the_cell(shell, monkeypatch):
    steps = Steps(monkeypatch, "slow", "after")
    runner = background.launch(shell, work)
    assert steps.started["slow"].wait(10)
    cell_started = in_thread(lambda: shell.events.trigger("pre_run_cell", None))
    assert not cell_started.wait(NEVER)  # the cell waits for the step in flight...
    steps.release.set()
    assert cell_started.wait(10)  # ...only for it
    assert not steps.started["after"].wait(NEVER)  # no step while the cell runs
    wait_until("the warm-up to pause", lambda: "paused while a cell runs" in runner.status())
    shell.events.trigger("post_run_cell", None)
    assert steps.started["after"].wait(10)  # the cell ended: the warm-up goes on
    wait_until("the warm-up to end", lambda: not runner.running)
    assert [s.name for s in runner.report.sections[0].steps] == ["slow", "after"]
    assert runner.report.notes[-1].startswith("ran in the background: ")


def test_a_cell_that_waits_lets_it_finish_and_shows_its_report(shell, monkeypatch, capsys):
    steps = Steps(monkeypatch, "first", "second")
    shell.user_ns.update(launch=lambda: background.launch(shell, work), started=steps.started)
    cell = shell.run_cell(
        f"runner = launch()\n"
        f"paused = not started['first'].wait({NEVER})  # started from this cell: waits for it\n"
        "%gpu_warmup --wait --quiet\n"  # this cell waits for it: it runs on, no deadlock
    )
    assert cell.success and shell.user_ns["paused"]
    assert capsys.readouterr().out.startswith("gpu_warmup: cuda:0 Fake GPU warm in ")
    shell.run_line_magic("gpu_warmup", "--status")
    assert "ended after" in capsys.readouterr().out


def test_a_plain_gpu_warmup_during_a_background_one_waits_for_it(shell, monkeypatch, capsys):
    steps = Steps(monkeypatch, "slow")
    runner = background.launch(shell, work)
    assert steps.started["slow"].wait(10)
    shell.run_line_magic("gpu_warmup", "--status")
    assert "now: slow" in capsys.readouterr().out
    shell.run_line_magic("gpu_warmup", "--background")
    assert "already running" in capsys.readouterr().out
    threading.Timer(0.2, steps.release.set).start()
    shell.run_line_magic("gpu_warmup", "--quiet")  # not a second warm-up: the report of this one
    assert capsys.readouterr().out.startswith("gpu_warmup: cuda:0 Fake GPU warm in ")
    assert not runner.running


def test_failures_are_kept_in_the_report_and_never_printed(shell, monkeypatch, capsys):
    hooked: list[object] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    Steps(monkeypatch, "context", "matmul", "after", fail="matmul")
    runner = background.launch(shell, work)
    report = runner.wait()
    failed = [s for s in report.sections[0].steps if s.error]
    assert [s.name for s in failed] == ["matmul"] and "no kernel image" in failed[0].error
    assert [s.name for s in report.sections[0].steps] == ["context", "matmul", "after"]
    assert "1 failed: matmul" in runner.status()

    def broken(pacer: warmup.Pacer | None) -> warmup.WarmupReport:
        raise ImportError("libcudnn.so.9: cannot open shared object file")

    report = background.launch(shell, broken).wait()
    assert report.notes[0] == (
        "the background warm-up failed: ImportError: libcudnn.so.9: cannot open shared object file"
    )
    assert "the background warm-up failed" in background.current().status()
    assert capsys.readouterr() == ("", "") and not hooked


def test_unloading_stops_it_between_steps(monkeypatch):
    from support.ipython_shell import shared_shell

    shell = shared_shell()
    undo = warmup_magic.register(shell)
    steps = Steps(monkeypatch, "slow", "never")
    runner = background.launch(shell, work)
    assert steps.started["slow"].wait(10)
    unloaded = in_thread(undo)
    assert not unloaded.wait(NEVER)  # unloading waits for the step in flight
    steps.release.set()
    assert unloaded.wait(10)
    assert not runner.running and not steps.started["never"].is_set()
    assert "stopped early" in " ".join(runner.report.notes)
    assert runner.cell_starts not in shell.events.callbacks["pre_run_cell"]
    assert runner.cell_ends not in shell.events.callbacks["post_run_cell"]
    assert background.current() is None


def test_status_and_wait_without_one(shell, capsys):
    shell.run_line_magic("gpu_warmup", "--status")
    shell.run_line_magic("gpu_warmup", "--wait")
    assert capsys.readouterr().out.splitlines() == ["gpu_warmup: no background warm-up was started."] * 2


class MainThread:
    """The kernel's event loop as the tests' own thread: callbacks queued from any thread, run
    when the test says (as the loop runs them between messages), and where the finish ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.queued: list[Callable[[], None]] = []
        self.finished_on: list[threading.Thread] = []
        monkeypatch.setattr(background, "main_thread_schedule", lambda shell: self.queued.append)

    def finish(self, report: warmup.WarmupReport) -> None:
        self.finished_on.append(threading.current_thread())
        report.notes.append("cuDNN's state warmed on this thread")

    def run_queued(self) -> None:
        while self.queued:
            self.queued.pop(0)()


def test_what_cudnn_keeps_per_thread_is_warmed_on_the_main_thread_when_idle(shell, monkeypatch):
    Steps(monkeypatch, "conv")
    loop = MainThread(monkeypatch)
    runner = background.launch(shell, work, loop.finish)
    wait_until("the thread to hand over to the main thread", lambda: loop.queued)
    assert runner.running and "when no cell runs" in runner.status()
    loop.run_queued()
    assert loop.finished_on == [threading.current_thread()]
    assert not runner.running and "cuDNN's state warmed on this thread" in runner.report.notes


def test_a_cell_that_starts_first_gets_the_main_threads_part_before_it_runs(shell, monkeypatch):
    Steps(monkeypatch, "conv")
    loop = MainThread(monkeypatch)
    runner = background.launch(shell, work, loop.finish)
    wait_until("the thread to hand over to the main thread", lambda: loop.queued)
    shell.events.trigger("pre_run_cell", None)  # before the loop got to it
    assert loop.finished_on == [threading.current_thread()] and not runner.running
    loop.run_queued()  # the loop's turn comes later: nothing runs twice
    shell.events.trigger("post_run_cell", None)
    assert len(loop.finished_on) == 1


def test_a_wait_runs_the_main_threads_part_and_a_stop_skips_it(shell, monkeypatch):
    Steps(monkeypatch, "conv")
    loop = MainThread(monkeypatch)
    report = background.launch(shell, work, loop.finish).wait()
    assert loop.finished_on == [threading.current_thread()]
    assert "cuDNN's state warmed on this thread" in report.notes
    runner = background.launch(shell, work, loop.finish)
    wait_until("the thread to hand over to the main thread", lambda: loop.queued)
    background.end()
    assert len(loop.finished_on) == 1 and not runner.running
    assert "its part on the main thread did not run: stopped first" in runner.report.notes


def start_a_cell_beside_it(shell, monkeypatch: pytest.MonkeyPatch, interrupt: bool) -> None:
    """A cell starts while a step runs and does not wait it out: the user interrupts the wait
    (the kernel's SIGINT, on this, the main thread) or it passes the longest wait."""
    if not interrupt:
        monkeypatch.setattr(background, "STEP_WAIT_S", 0.2)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as ipykernel has it in a cell
    sigint = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    try:
        if interrupt:
            sigint.start()
        shell.events.trigger("pre_run_cell", None)  # returns: the cell runs beside the step
        assert time.monotonic() - started < 10  # the interrupt ended the wait, not STEP_WAIT_S
    finally:
        sigint.cancel()
        if interrupt:
            sigint.join()
        signal.signal(signal.SIGINT, previous)


def started_beside_the_step_in_flight(shell, monkeypatch: pytest.MonkeyPatch, interrupt: bool) -> Steps:
    steps = Steps(monkeypatch, "slow", "after")
    background.launch(shell, work)
    assert steps.started["slow"].wait(10)
    start_a_cell_beside_it(shell, monkeypatch, interrupt)
    return steps


@pytest.mark.parametrize("interrupt", [True, False], ids=["interrupted", "waited-too-long"])
def test_a_cell_that_does_not_wait_out_the_step_stops_the_warmup_after_it(
    shell, monkeypatch, capsys, interrupt
):
    steps = started_beside_the_step_in_flight(shell, monkeypatch, interrupt)
    assert capsys.readouterr().out.startswith(
        "gpu_warmup: this cell runs beside the warm-up's step in flight (slow); the warm-up stops after it"
    )
    runner = background.current()
    assert runner.running and "now: slow; it stops after this step" in runner.status()
    steps.release.set()
    shell.events.trigger("post_run_cell", None)
    wait_until("the warm-up to end", lambda: not runner.running)
    assert not steps.started["after"].is_set()  # ...and none follows it, even once the cell has ended
    assert "stopped early: a cell started without waiting for the step in flight" in runner.report.notes
    assert "stopped early: a cell started without waiting" in runner.status()


class SeededSteps:
    """One step that draws from torch's CPU generator and a device's (a generator of its own
    standing in), then runs until released, as a model's set-up draws its weights and trains."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        self.torch = pytest.importorskip("torch")
        self.device = self.torch.Generator()
        self.drew, self.release, self.fail = threading.Event(), threading.Event(), fail
        monkeypatch.setattr(warmup.warmup_steps, "steps_for", lambda *args: [("draws", self._draw)])

    def _draw(self) -> None:
        self.torch.rand(8)
        self.torch.rand(8, generator=self.device)
        self.drew.set()
        assert self.release.wait(30), "the test never released the step"
        if self.fail:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def state(self) -> tuple:
        return self.torch.get_rng_state(), self.device.get_state()

    def same(self, a: tuple, b: tuple) -> bool:
        return all(self.torch.equal(x, y) for x, y in zip(a, b))

    def work(self, pacer: warmup.Pacer | None) -> warmup.WarmupReport:
        fake = fake_cuda()
        fake.get_rng_state, fake.set_rng_state = self.torch.get_rng_state, self.torch.set_rng_state
        fake.cuda.get_rng_state = lambda index: self.device.get_state()
        fake.cuda.set_rng_state = lambda state, index: self.device.set_state(state)
        return warmup.WarmupReport([warmup.warm_device(fake, 0, Choice(), pacer=pacer)])


@pytest.mark.parametrize("fail", [False, True], ids=["step-ran", "step-failed"])
def test_the_notebooks_random_numbers_are_put_back_after_each_step(shell, monkeypatch, fail):
    steps = SeededSteps(monkeypatch, fail)
    before = steps.state()
    runner = background.launch(shell, steps.work)
    assert steps.drew.wait(10)
    assert not steps.same(steps.state(), before)  # the step drew from both
    steps.release.set()
    wait_until("the warm-up to end", lambda: not runner.running)
    assert steps.same(steps.state(), before)
    assert bool(runner.report.sections[0].steps[0].error) == fail


@pytest.mark.parametrize("interrupt", [True, False], ids=["interrupted", "waited-too-long"])
def test_a_seed_set_by_a_cell_beside_the_step_holds_when_the_step_ends(shell, monkeypatch, interrupt):
    steps = SeededSteps(monkeypatch)
    runner = background.launch(shell, steps.work)
    assert steps.drew.wait(10)
    start_a_cell_beside_it(shell, monkeypatch, interrupt)
    steps.torch.manual_seed(0)
    steps.device.manual_seed(0)
    expected = steps.state()
    steps.release.set()
    wait_until("the step to end", lambda: not runner.running)
    assert steps.same(steps.state(), expected)  # the warm-up did not undo the cell's seeds
    shell.events.trigger("post_run_cell", None)
