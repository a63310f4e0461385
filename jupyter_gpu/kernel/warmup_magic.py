"""``%gpu_warmup`` and ``%%gpu_warmup``: the warm-up (``jupyter_gpu.warmup``) in a notebook, of
what the notebook uses (``--all``: everything), now or in the background; and the user's own cell
run once cold and then warm."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..doctor import no_gpu_reason
from ..warmup import (
    Pacer,
    Section,
    Step,
    WarmupReport,
    parse_devices,
    warm_optimizers,
    warm_this_thread,
    warm_up,
)
from ..warmup_choice import Choice, choose
from . import warmup_background as background
from .cellexec import run_source
from .extension import ShellMagics, unregister_magics
from .magic_args import parse as parse_args
from .torch_hook import after_torch_import
from .warmup_sources import sources

READING = "reading what the notebook uses"


def _parse_devices(text: str | None, torch: Any) -> list[int]:
    """The magic's reading of ``--devices``: this kernel's current GPU when none is given (GPU 0
    while CUDA is not initialised: nothing can have chosen another, and asking would initialise it)."""
    if text is None:
        return [torch.cuda.current_device() if torch.cuda.is_initialized() else 0]
    count = torch.cuda.device_count()
    try:
        return parse_devices(text, count)
    except ValueError as error:
        raise UsageError(f"{error} (this kernel sees {count} GPU{'s' if count != 1 else ''}).") from None


DEFERRED = (
    "the optimizers' first steps (their constructor imports torch._dynamo: seconds of CPU, no CUDA) "
    "run in the background while you read; a cell that starts meanwhile waits for the one in flight. "
    "%gpu_warmup --status says how far they are"
)


class _Work:
    """The warm-up, now or on the background thread: without a choice, it first reads what the
    notebook uses (in the background, between cells, like its steps). After a background run,
    ``finish`` runs on the kernel's main thread what cuDNN keeps per thread. With
    ``defer_optimizers`` it leaves the optimizers' steps out and keeps them in ``deferred``."""

    def __init__(
        self,
        ipython: InteractiveShell,
        devices: list[int],
        choice: Choice | None,
        nccl: bool,
        compile: bool,
        defer_optimizers: bool = False,
    ) -> None:
        self.ipython, self.devices, self.choice, self.nccl, self.compile = (
            ipython,
            devices,
            choice,
            nccl,
            compile,
        )
        self.defer_optimizers = defer_optimizers
        self.deferred: Choice | None = None

    def __call__(self, pacer: Pacer | None) -> WarmupReport:
        if self.choice is None:
            if pacer is not None and not pacer.before(READING):
                return WarmupReport([], ["stopped before it began"])
            start = time.perf_counter()
            self.choice = choose(sources(self.ipython))
            if pacer is not None:
                pacer.after(Step(READING, (time.perf_counter() - start) * 1e3))
        defer = self.defer_optimizers and (self.choice.optimizer_import or self.choice.grad_scaler)
        self.deferred = self.choice if defer else None
        report = warm_up(
            self.devices, self.choice, nccl=self.nccl, compile=self.compile, pacer=pacer, optimizers=not defer
        )
        if defer:
            report.notes.append(DEFERRED)
        return report

    def launch_deferred(self) -> None:
        """The optimizers' steps left out of a foreground warm-up, in the background (they start
        once the magic's cell has ended)."""
        if self.deferred is not None:
            choice, devices = self.deferred, self.devices
            background.launch(
                self.ipython, lambda pacer: warm_optimizers(devices, choice, pacer), leftover=True
            )

    def finish(self, report: WarmupReport) -> None:
        warm_this_thread(report, self.devices, self.choice)


def _show(report: WarmupReport, quiet: bool) -> None:
    if quiet:
        print(report.summary())
    else:
        display(report)


@magics_class
class WarmupMagics(ShellMagics):
    @magic_arguments()
    @argument(
        "--devices", default=None, help="GPU indices such as 0,1, or 'all' (default: the current device)"
    )
    @argument(
        "--all", action="store_true", help="warm every family, dtype and optimizer, not only the notebook's"
    )
    @argument("--background", action="store_true", help="return at once and warm on a thread between cells")
    @argument("--wait", action="store_true", help="wait for the background warm-up and show its report")
    @argument("--status", action="store_true", help="say how far the background warm-up has got")
    @argument("--nccl", action="store_true", help="also start an NCCL communicator (in this process only)")
    @argument("--compile", action="store_true", help="also compile a tiny function with torch.compile")
    @argument("--repeat", type=int, default=1, help="cell form: warm runs after the cold one (default 1)")
    @argument("--quiet", action="store_true", help="print one line instead of the table")
    @line_cell_magic
    def gpu_warmup(self, line: str, cell: str | None = None) -> None:
        """Pay CUDA's start-up costs now, so that the first real step is not mysteriously slow.

        ``%gpu_warmup [--devices 0,1|all] [--all] [--nccl] [--compile] [--quiet]`` warms what
        this notebook uses: the layer families (conv, norms, linear, embedding, transformer and
        attention), half-precision dtypes and optimizers named in its code cells (the notebook
        file), in the cells this kernel ran, or held by it as models and optimizers; nothing
        named: the context, elementwise kernels and an fp32 matmul. ``--all`` warms everything.
        Each device in parallel; then it shows what each step cost and why it chose them. The
        optimizers' first steps (their constructor imports torch._dynamo: seconds of CPU, no
        CUDA) run in the background once the cell ends, as with ``--background``. A second call
        is near free and says so.

        ``--background`` returns at once and warms on a thread while you read and type: a cell
        that starts meanwhile waits at most for the step in flight, and the warm-up waits until
        the cell ends. ``--status`` says how far it has got; ``--wait`` (or a plain
        ``%gpu_warmup``) waits for it and shows its report.

        ``%%gpu_warmup [--repeat N]`` runs the cell itself once cold and N times warm (write it
        so that running it more than once is harmless, e.g. a step on a dummy batch): the only
        way to load the kernels of your own model. It reports the cold and warm times.

        Without a usable GPU it prints the doctor's one-line verdict and does nothing else.
        After a warm-up CUDA is initialised in this kernel, as after any CUDA call.
        """
        __tracebackhide__ = True  # noqa: F841 -- keep this frame out of user tracebacks
        args = parse_args(self.gpu_warmup, line)
        if args.repeat < 1:
            raise UsageError("--repeat must be 1 or more.")
        if cell is not None and (args.background or args.wait or args.status or args.all):
            raise UsageError(
                "%%gpu_warmup runs its cell now: --background, --wait, --status and --all are for %gpu_warmup."
            )
        runner = background.current()
        if args.status:
            print(
                runner.status()
                if runner
                else f"gpu_warmup: {background.not_started or 'no background warm-up was started'}."
            )
            return
        if (
            runner is not None
            and runner.running
            and not args.wait
            and (runner.leftover or runner.stopping or cell is not None)
        ):
            runner.wait()  # a leftover, one that stops, or any before a cell is timed; then this call
        if runner is not None and (args.wait or (runner.running and not args.background)):
            _show(runner.wait(), args.quiet)  # a foreground call during a background one waits for it
            return
        if args.wait:
            print(f"gpu_warmup: {background.not_started or 'no background warm-up was started'}.")
            return
        if runner is not None and runner.running:
            print(
                "gpu_warmup: a background warm-up is already running; %gpu_warmup --status says how far it is."
            )
            return
        reason = no_gpu_reason()
        if reason is not None:
            print(f"gpu_warmup: nothing to warm. {reason}. Run %gpu_doctor for the fix.")
            return
        import torch

        devices = _parse_devices(args.devices, torch)
        if cell is not None:
            _show(WarmupReport([self._time_cell(torch, cell, devices, args.repeat)]), args.quiet)
            return
        work = _Work(
            self.ipython,
            devices,
            Choice.all() if args.all else None,
            args.nccl,
            args.compile,
            defer_optimizers=not (args.all or args.background),
        )
        if args.background:
            background.launch(self.ipython, work, work.finish)
            print(
                "gpu_warmup: warming in the background; a cell waits at most for the step in flight. "
                "%gpu_warmup --status says how far it is, --wait shows its report."
            )
        else:
            report = work(None)
            work.launch_deferred()
            _show(report, args.quiet)
            if args.quiet and work.deferred is not None:
                print(f"gpu_warmup: {DEFERRED}.")

    def _time_cell(self, torch: Any, cell: str, devices: list[int], repeat: int) -> Section:
        __tracebackhide__ = True  # noqa: F841 -- keep this frame out of user tracebacks

        def run() -> float:
            start = time.perf_counter()
            run_source(self.ipython, cell)
            for d in devices:
                torch.cuda.synchronize(d)
            return (time.perf_counter() - start) * 1e3

        section = Section("cell", has_total=False)
        cold = run()
        warm = min(run() for _ in range(repeat))
        section.steps = [Step("first run (cold)", cold), Step(f"best of {repeat} warm run(s)", warm)]
        section.notes.append(f"start-up cost paid now: {max(cold - warm, 0):,.0f} ms")
        return section


def warm_after_torch_import(ipython: InteractiveShell) -> Callable[[], None]:
    """``c.KernelAgent.warmup = "background"``: once the notebook has imported torch, warm what it
    uses in the background, where a GPU is usable (else say why once); returns the undo."""

    def begin() -> None:
        try:
            reason = no_gpu_reason()
            if reason is None:
                import torch

                work = _Work(ipython, _parse_devices(None, torch), None, False, False)
                background.launch(ipython, work, work.finish)
                return
            background.not_started = f"no background warm-up: {reason}"
        except Exception as error:  # the user's import cell must not show a traceback of ours
            background.not_started = f"the background warm-up did not start: {type(error).__name__}: {error}"
        print(f"gpu_warmup: {background.not_started}.")

    cancel = after_torch_import(ipython, begin)

    def undo() -> None:
        cancel()
        background.end()

    return undo


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = WarmupMagics(ipython)
    ipython.register_magics(magics)

    def undo() -> None:
        background.end()  # unloading stops a background warm-up between steps
        unregister_magics(ipython, magics)

    return undo
