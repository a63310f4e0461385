"""``%%amp`` and ``%amp on|off``: run cells under ``torch.amp.autocast`` without editing them.

Autocast state is thread-local, so the persistent mode enters a fresh autocast context in the
thread that runs each cell (``pre_run_cell``) and always leaves it when the cell ends
(``post_run_cell``), whether or not the cell raised. torch is imported only when a magic runs.
"""

from __future__ import annotations

import functools
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ..analysis.units import format_bytes_change
from ..doctor import no_gpu_reason
from .cellexec import run_source
from .extension import ShellMagics, unregister_magics
from .magic_args import parse as parse_args

SCALER_NAME = "amp_scaler"
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class AmpSettings:
    """Concrete autocast settings: no "auto" left in them."""

    device: str
    dtype: str
    tf32: bool | None = None

    def describe(self) -> str:
        tf32 = "" if self.tf32 is None else f", TF32 {'on' if self.tf32 else 'off'}"
        return f"{self.dtype} autocast on {self.device}{tf32}"


def _native_bf16(torch: Any) -> bool:
    """bf16 in hardware (Ampere or newer), not the slow emulation torch also accepts."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.3 has no emulation argument
        return bool(torch.cuda.is_bf16_supported())


def _autocast_refusal(torch: Any, device: str, dtype: str) -> str | None:
    """Why torch would refuse or silently disable this autocast, or None if it accepts it.

    torch disables autocast with only a warning for a dtype the device cannot autocast to
    (e.g. fp16 on the CPU before torch 2.1); turn that warning into a refusal.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # deprecation notices are not refusals
        try:
            torch.amp.autocast(device, dtype=getattr(torch, _TORCH_DTYPES[dtype]))
        except (UserWarning, RuntimeError) as error:
            return str(error).splitlines()[0]
    return None


@functools.lru_cache(maxsize=32)
def resolve(device: str, dtype: str, tf32: str | None) -> AmpSettings:
    """Turn the user's options into concrete settings, or raise UsageError naming valid choices.

    Cached: probing which dtypes torch accepts costs about a millisecond, paid once per option
    set rather than on every cell (what a device supports does not change within a process).
    """
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        why = no_gpu_reason() or "CUDA is not available in this kernel"
        raise UsageError(
            f"--device cuda: {why} (%gpu_doctor says how to fix it). "
            "Valid here: --device cpu or --device auto."
        )
    if dtype == "auto":
        dtype = "bf16" if device == "cpu" or _native_bf16(torch) else "fp16"
    valid = [d for d in _TORCH_DTYPES if _autocast_refusal(torch, device, d) is None]
    if dtype not in valid:
        reason = _autocast_refusal(torch, device, dtype)
        choices = ", ".join(f"--dtype {d}" for d in valid) or "none: no autocast on this device"
        raise UsageError(f"--dtype {dtype} on {device}: {reason} Valid here: {choices}.")
    if tf32 is not None and device != "cuda":
        raise UsageError("--tf32 applies to CUDA matmuls and convolutions; use it with --device cuda.")
    return AmpSettings(device, dtype, None if tf32 is None else tf32 == "on")


@contextmanager
def _tf32(torch: Any, on: bool) -> Iterator[None]:
    matmul = torch.get_float32_matmul_precision()
    conv = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high" if on else "highest")
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = conv


@contextmanager
def amp_scope(settings: AmpSettings) -> Iterator[None]:
    """Autocast (and TF32 if asked) for one cell; restores everything it changed on exit."""
    import torch

    with ExitStack() as stack:
        if settings.tf32 is not None:
            stack.enter_context(_tf32(torch, settings.tf32))
        # No weight-cast cache: a cell is often a whole training loop, and the cache keeps the
        # first step's low-precision weights for the entire context, so the model never learns.
        stack.enter_context(
            torch.amp.autocast(
                settings.device, dtype=getattr(torch, _TORCH_DTYPES[settings.dtype]), cache_enabled=False
            )
        )
        yield


def _cuda_memory(torch: Any) -> tuple[int, int]:
    """(allocated, peak allocated) on the current device; zeros before CUDA is initialised."""
    if not torch.cuda.is_initialized():
        return 0, 0
    return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()


@magics_class
class AmpMagics(ShellMagics):
    """Mixed precision for one cell (``%%amp``) or for every cell (``%amp on``)."""

    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell)
        self.persistent: AmpSettings | None = None
        self._scopes: dict[int, ExitStack] = {}  # thread id -> autocast of the running cell
        self._scalers: dict[tuple[str, str], Any] = {}

    @magic_arguments()
    @argument("state", nargs="?", choices=["on", "off"], help="line mode: on or off for every following cell")
    @argument(
        "--dtype",
        choices=["bf16", "fp16", "auto"],
        default="auto",
        help="auto: bf16 where the device has it, else fp16",
    )
    @argument(
        "--device", choices=["cuda", "cpu", "auto"], default="auto", help="auto: cuda if available, else cpu"
    )
    @argument(
        "--tf32",
        choices=["on", "off"],
        default=None,
        help="TF32 for fp32 CUDA matmuls and convolutions, restored after the cell",
    )
    @line_cell_magic
    def amp(self, line: str, cell: str | None = None) -> Any:
        """Run a cell under torch.amp.autocast, or every cell from now on.

        ``%%amp [--dtype bf16|fp16|auto] [--device cuda|cpu|auto] [--tf32 on|off]`` runs the cell
        under autocast and prints one line: dtype, device, wall time, and on CUDA how much the
        peak of allocated memory rose. ``%amp on [options]`` applies the same to every cell that
        follows (and to the rest of this one); ``%amp off`` stops; ``%amp`` says which is active.

        The cell sees ``amp_scaler``, a ``torch.amp.GradScaler`` kept across cells. It scales only
        under fp16 (bf16 has fp32's range and needs no scaling), so the same training cell
        (``amp_scaler.scale(loss).backward(); amp_scaler.step(opt); amp_scaler.update()``) works
        with either dtype. An existing user variable of that name is left alone.
        """
        __tracebackhide__ = True  # noqa: F841 -- keep this frame out of user tracebacks
        args = parse_args(self.amp, line)
        if cell is None:
            return self._line(args)
        if args.state:
            raise UsageError(f"%%amp takes no '{args.state}'; use %amp {args.state} on its own line.")
        settings = resolve(args.device, args.dtype, args.tf32)
        return self._run_cell(settings, cell)

    def _run_cell(self, settings: AmpSettings, cell: str) -> Any:
        __tracebackhide__ = True  # noqa: F841 -- keep this frame out of user tracebacks
        import torch

        self._offer_scaler(settings)
        on_cuda = settings.device == "cuda"
        before = _cuda_memory(torch)
        start = time.perf_counter()
        with amp_scope(settings):
            result = run_source(self.ipython, cell)
        if on_cuda and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        summary = f"amp: {settings.describe()}, {elapsed * 1e3:,.1f} ms"
        if on_cuda:
            after = _cuda_memory(torch)
            summary += f", allocated {format_bytes_change(after[0] - before[0])}, peak {format_bytes_change(after[1] - before[1])}"
        print(summary)
        return result

    def _line(self, args: Any) -> None:
        if args.state is None:
            if (args.dtype, args.device, args.tf32) != ("auto", "auto", None):
                raise UsageError("Options go with 'on': %amp on --dtype bf16 --device cuda")
            state = f"on: {self.persistent.describe()}" if self.persistent else "off"
            print(f"amp is {state}")
            return
        if args.state == "off":
            self.persistent = None
            self._close_scope()
            print("amp off")
            return
        self.persistent = resolve(args.device, args.dtype, args.tf32)
        self._close_scope()
        self._open_scope(self.persistent)
        print(f"amp on: {self.persistent.describe()} for every cell until %amp off")

    def _offer_scaler(self, settings: AmpSettings) -> None:
        import torch

        ns = self.ipython.user_ns
        current = ns.get(SCALER_NAME)
        if current is not None and not any(current is s for s in self._scalers.values()):
            return
        key = (settings.device, settings.dtype)
        if key not in self._scalers:
            self._scalers[key] = torch.amp.GradScaler(settings.device, enabled=settings.dtype == "fp16")
        ns[SCALER_NAME] = self._scalers[key]

    def _open_scope(self, settings: AmpSettings) -> None:
        self._offer_scaler(settings)
        stack = ExitStack()
        stack.enter_context(amp_scope(settings))
        self._scopes[threading.get_ident()] = stack

    def _close_scope(self) -> None:
        stack = self._scopes.pop(threading.get_ident(), None)
        if stack is not None:
            stack.close()

    def pre_run_cell(self, info: Any = None) -> None:
        if self.persistent is not None:
            self._close_scope()  # a scope left behind if a post_run_cell never came
            self._open_scope(self.persistent)

    def post_run_cell(self, result: Any = None) -> None:
        self._close_scope()

    def close(self) -> None:
        """Leave autocast and drop the scaler this extension put in the user namespace."""
        self.persistent = None
        self._close_scope()
        if any(self.ipython.user_ns.get(SCALER_NAME) is s for s in self._scalers.values()):
            del self.ipython.user_ns[SCALER_NAME]


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = AmpMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    ipython.events.register("post_run_cell", magics.post_run_cell)

    def undo() -> None:
        ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
        ipython.events.unregister("post_run_cell", magics.post_run_cell)
        magics.close()
        unregister_magics(ipython, magics)

    return undo
