"""``%gpu_warmup --background``: the warm-up on a daemon thread while the user reads and types.

A cell and a warm-up step never run at once: when a cell starts (IPython's ``pre_run_cell``) it
waits for the step in flight, if any, and the warm-up then waits until the cell has ended
(``post_run_cell``) before its next step. So a cell waits at most for one step, gets the GPU and
the random number generators to itself, and nothing it does can deadlock with the warm-up, which
never waits for the kernel. After each step the notebook's random number generators are put back
as they were. A cell that does not wait the step out (the user interrupts the wait, or it passes
``STEP_WAIT_S``) runs beside it: that step then leaves the generators alone (putting them back
would undo a seed the cell sets, but what it drew stays drawn), no step follows it, and the cell
says so and to seed again once it has ended. The optimizers' steps a plain ``%gpu_warmup``
leaves here draw only from the warm-up's own generator; the layer families' models draw their
first weights (and dropout) from the device's. A cell that asks for the warm-up
(``%gpu_warmup --wait``) lets it run
on while it waits. The report, failures included, is kept for ``--wait`` and ``--status``, never
printed by the thread (it would land in whatever cell runs then).

What cuDNN keeps per thread (its handle, PyTorch's convolution and attention plans) a thread
cannot warm for the kernel's main thread, which runs the cells: on an H200 the first step of a
transformer after a warm-up on another thread took 48 ms instead of 5. So when the thread is done,
its ``finish`` runs those families on the main thread: from the kernel's event loop while no cell
runs, or at the next cell's start, or in ``--wait``, whichever comes first.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from ..warmup import Pacer, Step, WarmupReport

Work = Callable[[Pacer], WarmupReport]
Finish = Callable[[WarmupReport], None]  # the main thread's part, added to the report
Schedule = Callable[[Callable[[], None]], None]  # runs a callback on the main thread when idle
STEP_WAIT_S = 120.0  # the longest a starting cell waits for the step in flight (never forever)
STOP_WAIT_S = 30.0  # the longest unloading waits for the step in flight


class BackgroundWarmup:
    """One background warm-up: ``work`` runs on a daemon thread and asks this object (its pacer)
    before each step. ``cell_running``: whether a cell is running as it starts (then the first
    step waits for that cell to end)."""

    def __init__(
        self, work: Work, cell_running: bool, finish: Finish | None = None, schedule: Schedule | None = None
    ) -> None:
        self._work = work
        self._finish = finish
        self._schedule = schedule
        self._pending: WarmupReport | None = None  # the thread's report, awaiting the main thread's part
        self._cond = threading.Condition()
        self._cell_running = cell_running
        self._waiters = 0
        self._stopping = False
        self._beside = False  # a cell started without waiting for the step in flight
        self._stop_reason = "stopped early: the extension was unloaded or the kernel shut down"
        self._in_flight: dict[int, str] = {}  # thread -> step (one thread per device)
        self.done: list[Step] = []
        self.paused_s = 0.0
        self.report: WarmupReport | None = None
        self.started = time.monotonic()
        self.ended: float | None = None
        self.leftover = False
        self._thread = threading.Thread(target=self._run, name="gpu-warmup-background", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- the pacer: asked by the warm-up's thread(s) ---------------------------------------------

    def before(self, step: str) -> bool:
        """Wait while a cell runs (unless a cell waits for us); False once stopping."""
        with self._cond:
            paused = time.monotonic()
            while self._cell_running and not self._waiters and not self._stopping:
                self._cond.wait()
            self.paused_s += time.monotonic() - paused
            if self._stopping:
                return False
            self._in_flight[threading.get_ident()] = step
            return True

    def settle(self, restore: Callable[[], None]) -> None:
        """After each step: the notebook's generators back as they were, unless a cell started
        beside the step (putting them back would undo a seed it set)."""
        with self._cond:
            if not self._beside:
                restore()
            self._in_flight.pop(threading.get_ident(), None)  # a cell that starts now runs after it
            self._cond.notify_all()

    def after(self, step: Step) -> None:
        with self._cond:
            self._in_flight.pop(threading.get_ident(), None)
            self.done.append(step)
            self._cond.notify_all()

    # -- IPython's events: the kernel's main thread ----------------------------------------------

    def cell_starts(self, info: Any = None) -> None:
        """Pause the warm-up, after the step in flight (which the cell waits for)."""
        beside = ""
        try:
            with self._cond:
                self._cell_running = True
                deadline = time.monotonic() + STEP_WAIT_S
                while self._in_flight and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
        except KeyboardInterrupt:  # the user interrupted the wait: the cell runs now
            pass
        finally:
            with self._cond:
                self._cell_running = True
                if self._in_flight:  # the cell runs beside this step: its seeds are its own, no step follows
                    beside = ", ".join(self._in_flight.values())
                    self._beside = self._stopping = True
                    self._stop_reason = "stopped early: a cell started without waiting for the step in flight"
                    self._cond.notify_all()
        if beside:
            print(
                f"gpu_warmup: this cell runs beside the warm-up's step in flight ({beside}); the warm-up "
                "stops after it and does not put back what it drew from the GPU's random number generator: "
                "for reproducible numbers, seed again (torch.manual_seed) after %gpu_warmup --wait."
            )
            return
        self._finish_now()  # the thread is done: its per-thread part, before the cell needs it

    def cell_ends(self, result: Any = None) -> None:
        with self._cond:
            self._cell_running = False
            self._cond.notify_all()
            pending = self._pending is not None
        if pending and self._schedule is not None:
            self._schedule(self._finish_now)

    def _finish_now(self) -> None:
        """The main thread's part, once: from the kernel's event loop between messages, from a
        starting cell or from ``--wait`` (never from the warm-up's thread)."""
        with self._cond:
            report, self._pending = self._pending, None
        if report is None:
            return
        try:
            assert self._finish is not None  # only a runner with one keeps a report pending
            self._finish(report)
        except BaseException as error:  # an interrupt included: kept in the report, never raised here
            report.notes.append(f"its part on the main thread failed: {type(error).__name__}: {error}")
        with self._cond:
            self._end(report)

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            report = self._work(self)
        except BaseException as error:  # kept for the report: a traceback would land in a random cell
            report = WarmupReport([], [f"the background warm-up failed: {type(error).__name__}: {error}"])
        with self._cond:
            if self._finish is None or self._stopping or not report.sections:
                self._end(report)
                return
            self._pending = report
            idle = not self._cell_running
        if idle and self._schedule is not None:
            self._schedule(self._finish_now)

    def _end(self, report: WarmupReport) -> None:
        """Under the lock: the report is final."""
        self.ended = time.monotonic()
        if self._stopping:
            report.notes.append(self._stop_reason)
        report.notes.append(
            f"ran in the background: {self.ended - self.started:,.1f} s from start to end, "
            f"{self.paused_s:,.1f} s of it paused while cells ran"
        )
        self.report = report
        self._cond.notify_all()

    # -- what the magic asks ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.report is None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def wait(self) -> WarmupReport:
        """Its report, once it has finished. Called from a running cell, so the warm-up runs on
        meanwhile (it would otherwise wait for this very cell)."""
        with self._cond:
            self._waiters += 1
            self._cond.notify_all()
        try:
            self._thread.join()
        finally:
            with self._cond:
                self._waiters -= 1
        self._finish_now()  # called from a cell: this is the main thread
        assert self.report is not None  # set by the thread, or by the main thread's part
        return self.report

    def stop(self) -> None:
        """Stop between steps and wait (boundedly) for the step in flight; safe to call twice."""
        atexit.unregister(self.stop)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)
        with self._cond:
            if self._pending is not None:
                report, self._pending = self._pending, None
                report.notes.append("its part on the main thread did not run: stopped first")
                self._end(report)

    def status(self) -> str:
        """One line: how far it has got, or how it ended."""
        with self._cond:
            failed = [s.name for s in self.done if s.error]
            failures = f"; {len(failed)} failed: {', '.join(failed)}" if failed else ""
            if self.report is not None and self.ended is not None:
                problems = [n for n in self.report.notes if "failed:" in n or "stopped" in n]
                return (
                    f"gpu_warmup: the background warm-up ended after {self.ended - self.started:,.1f} s, "
                    f"{len(self.done)} steps run{failures}{'; ' if problems else ''}{'; '.join(problems)}. "
                    "%gpu_warmup --wait shows its report."
                )
            if self._pending is not None:
                return (
                    f"gpu_warmup: the background thread is done ({len(self.done)} steps{failures}); what cuDNN "
                    "keeps per thread is warmed on the kernel's main thread when no cell runs."
                )
            now = ", ".join(self._in_flight.values())
            where = f"now: {now}" if now else "paused while a cell runs"
            if self._stopping:
                where += "; it stops after this step"
            return (
                f"gpu_warmup: the background warm-up has run {time.monotonic() - self.started:,.1f} s, "
                f"{len(self.done)} steps done{failures}; {where}. %gpu_warmup --wait waits for it."
            )


_current: BackgroundWarmup | None = None
_undo_current: Callable[[], None] | None = None
not_started: str | None = None  # why the automatic one did not start, for --status


def current() -> BackgroundWarmup | None:
    return _current


def cell_is_running(ipython: InteractiveShell) -> bool:
    """True while a cell executes (IPython points the displayhook at that cell's result)."""
    return getattr(ipython.displayhook, "exec_result", None) is not None


def main_thread_schedule(ipython: InteractiveShell) -> Schedule | None:
    """The kernel's event loop, which runs callbacks on the main thread between messages
    (tornado's ``add_callback`` may be called from any thread); None outside a kernel."""
    loop = getattr(getattr(ipython, "kernel", None), "io_loop", None)
    return getattr(loop, "add_callback", None)


def launch(
    ipython: InteractiveShell, work: Work, finish: Finish | None = None, leftover: bool = False
) -> BackgroundWarmup:
    """Start a background warm-up, replacing a finished one; the caller checks none is running.
    ``leftover``: what a foreground ``%gpu_warmup`` left to the background, not one the user
    started (a later call waits for it and then does what it asks)."""
    global _current, _undo_current
    end()
    runner = BackgroundWarmup(work, cell_is_running(ipython), finish, main_thread_schedule(ipython))
    runner.leftover = leftover
    ipython.events.register("pre_run_cell", runner.cell_starts)
    ipython.events.register("post_run_cell", runner.cell_ends)

    def undo() -> None:
        runner.stop()
        for event, callback in (("pre_run_cell", runner.cell_starts), ("post_run_cell", runner.cell_ends)):
            with contextlib.suppress(ValueError):
                ipython.events.unregister(event, callback)

    _current, _undo_current = runner, undo
    atexit.register(runner.stop)  # kernel shutdown: no CUDA call left running at interpreter exit
    runner.start()
    return runner


def end() -> None:
    """Stop the current background warm-up, if any, and remove its event callbacks."""
    global _current, _undo_current
    if _undo_current is not None:
        _undo_current()
    _current = _undo_current = None
