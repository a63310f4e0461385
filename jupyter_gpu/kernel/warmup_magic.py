"""``%gpu_warmup`` and ``%%gpu_warmup``: the warm-up (``jupyter_gpu.warmup``) in a notebook, and
the user's own cell run once cold and then warm."""

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
from ..warmup import Section, Step, WarmupReport, parse_devices, warm_up
from .cellexec import run_source
from .extension import ShellMagics, unregister_magics
from .magic_args import parse as parse_args


def _parse_devices(text: str | None, torch: Any) -> list[int]:
    """The magic's reading of ``--devices``: this kernel's current GPU when none is given."""
    if text is None:
        return [torch.cuda.current_device()]
    count = torch.cuda.device_count()
    try:
        return parse_devices(text, count)
    except ValueError as error:
        raise UsageError(f"{error} (this kernel sees {count} GPU{'s' if count != 1 else ''}).") from None


@magics_class
class WarmupMagics(ShellMagics):
    @magic_arguments()
    @argument(
        "--devices", default=None, help="GPU indices such as 0,1, or 'all' (default: the current device)"
    )
    @argument("--nccl", action="store_true", help="also start an NCCL communicator (in this process only)")
    @argument("--compile", action="store_true", help="also compile a tiny function with torch.compile")
    @argument("--repeat", type=int, default=1, help="cell form: warm runs after the cold one (default 1)")
    @argument("--quiet", action="store_true", help="print one line instead of the table")
    @line_cell_magic
    def gpu_warmup(self, line: str, cell: str | None = None) -> None:
        """Pay CUDA's start-up costs now, so that the first real step is not mysteriously slow.

        ``%gpu_warmup [--devices 0,1|all] [--nccl] [--compile] [--quiet]`` runs, per device (in
        parallel): the CUDA context, elementwise/reduction/RNG kernels, a matmul in each dtype,
        scaled-dot-product attention, two steps of SGD, Adam and AdamW (foreach and fused), and
        training steps (forward, cross-entropy, backward) of small CNNs, linear layers of common
        widths and transformer blocks, in fp32 and under bf16 autocast; then shows what each
        cost. A second call is near free and says so.

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
        reason = no_gpu_reason()
        if reason is not None:
            print(f"gpu_warmup: nothing to warm. {reason}. Run %gpu_doctor for the fix.")
            return
        import torch

        devices = _parse_devices(args.devices, torch)
        if cell is None:
            report = warm_up(devices, nccl=args.nccl, compile=args.compile)
        else:
            report = WarmupReport([self._time_cell(torch, cell, devices, args.repeat)])
        if args.quiet:
            print(report.summary())
        else:
            display(report)

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


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = WarmupMagics(ipython)
    ipython.register_magics(magics)
    return lambda: unregister_magics(ipython, magics)
