"""``%%gpu_profile``: run a cell under ``torch.profiler`` and say why it is slow.

The profile is exported as a Chrome trace and read back by ``jupyter_gpu.analysis.profile``
(tables and hints are pure functions of that trace, and of what the Jupyter server's samples say
the GPUs did meanwhile: ``gpm_samples``), then the trace is moved to where the user can open it.
The cell runs as it would without the magic: same namespace, same result, and an error keeps its
traceback (the profile of what ran is shown first).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from ..analysis.profile import Profile, analyse
from ..analysis.profile_hints import Facts
from ..analysis.profile_trace import CELL_MARK, trace_devices
from .cellexec import run_source
from .extension import ShellMagics, cell_number, unregister_magics
from .gpm_samples import read_activity
from .magic_args import parse as parse_args
from .magic_args import quoted_path, shown

MAX_TOP = 1000


def default_trace_path(ipython: InteractiveShell) -> Path:
    """Next to the notebook, named after it and the cell's execution count.

    ipykernel puts the notebook's path in ``__session__`` (from jupyter_server's
    ``JPY_SESSION_NAME``); elsewhere (a terminal IPython) the working directory and "ipython".
    """
    session = ipython.user_ns.get("__session__")
    notebook = Path(session) if isinstance(session, str) and session else None
    folder = notebook.parent if notebook else Path.cwd()
    stem = notebook.stem if notebook else "ipython"
    return folder / f"{stem}-In{cell_number(ipython)}.pt.trace.json"


def trace_target(ipython: InteractiveShell, text: str | None) -> Path:
    """Where the trace goes, checked before the cell runs: a path that can name no file is one
    UsageError now rather than a traceback after the cell's work. Without ``--trace``, a file in
    the notebook's folder (which others may write to: a link planted there is never followed)."""
    if text is None:
        return default_trace_path(ipython)
    try:
        target = Path(text).expanduser()
        if target.is_dir():  # a folder the user named (a link to one of theirs included)
            target = target / default_trace_path(ipython).name
        folder_exists = target.parent.is_dir()
        special = target.exists() and not (target.is_file() or target.is_symlink())
    except (OSError, RuntimeError) as exc:  # a name too long, a folder not ours; ~nobody
        raise UsageError(f"--trace {shown(text)}: {getattr(exc, 'strerror', None) or exc}") from None
    if target.name in ("", ".", ".."):
        raise UsageError(f"--trace {shown(text)} names no file (and is no folder)")
    if not folder_exists:
        raise UsageError(f"--trace {shown(text)}: there is no folder {shown(str(target.parent))}")
    if special:  # the rename would replace a device or a pipe (/dev/null, for root)
        raise UsageError(f"--trace {shown(text)} is not a file: give a file or a folder")
    return target


def _facts(torch: Any) -> Facts:
    return Facts(
        tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(torch.backends.cudnn.allow_tf32),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
    )


@magics_class
class ProfileMagics(ShellMagics):
    @magic_arguments()
    @argument(
        "--trace",
        metavar="PATH",
        type=quoted_path,
        default=None,
        help="where to save the Chrome/Perfetto trace (a file, or a folder for the default name); "
        "default: next to the notebook, NOTEBOOK-In<n>.pt.trace.json",
    )
    @argument("--top", type=int, default=10, help="rows per table (default 10)")
    @argument(
        "--sort",
        choices=["device", "cpu", "memory"],
        default=None,
        help="order of the operator table (default: device time with a GPU, CPU time without)",
    )
    @argument(
        "--record-shapes", action="store_true", help="record input shapes and dtypes (Tensor Core checks)"
    )
    @argument("--memory", action="store_true", help="record allocations: peak and the largest ones")
    @cell_magic
    def gpu_profile(self, line: str, cell: str) -> Any:
        """Profile a cell with torch.profiler and say why it is slow.

        ``%%gpu_profile [--trace PATH] [--top N] [--sort device|cpu|memory] [--record-shapes]
        [--memory]`` runs the cell under torch.profiler (CUDA and CPU activities where there is
        a GPU, CPU alone without one) and shows: the wall time, how busy the GPU was and its
        longest idle gaps, the top operators and GPU kernels, with ``--memory`` the peak and the
        largest allocations, and hints with their evidence and a fix (input pipeline,
        launch-bound loops, fp32 without Tensor Cores, odd matmul shapes, pageable copies, host
        syncs, unfused attention, cuDNN benchmark). Where the Jupyter server samples GPU
        performance monitoring (Hopper and later), it adds what each GPU really did while the
        cell ran (SM and tensor-core activity beside NVML's utilisation) and says when the GPU
        was busy by utilisation but its SMs mostly idle. The trace is saved for chrome://tracing
        or Perfetto. The cell's variables and result are as without the magic.
        """
        __tracebackhide__ = True  # noqa: F841 -- keep this frame out of user tracebacks
        args = parse_args(self.gpu_profile, line)
        if not 1 <= args.top <= MAX_TOP:
            raise UsageError(f"--top must be between 1 and {MAX_TOP}.")
        if args.sort == "memory" and not args.memory:
            raise UsageError("--sort memory needs --memory (allocations are recorded only then).")
        target = trace_target(self.ipython, args.trace)
        # kineto prints its start and stop to the process's stderr, which lands in the cell.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        cuda = torch.cuda.is_available()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        profiler = profile(
            activities=activities, record_shapes=args.record_shapes, profile_memory=args.memory
        )
        wall_us: float | None = None
        window: tuple[float, float] | None = None  # unix seconds, as the server stamps samples
        try:
            with profiler:
                start, began = time.perf_counter(), time.time()
                try:
                    with record_function(CELL_MARK):
                        return run_source(self.ipython, cell)
                finally:
                    if cuda and torch.cuda.is_initialized():
                        torch.cuda.synchronize()  # the GPU's share of the cell ends here
                    wall_us = (time.perf_counter() - start) * 1e6
                    window = (began, time.time())
        finally:
            display(_result(profiler, _facts(torch), args, target, wall_us, window))


def _result(
    profiler: Any,
    facts: Facts,
    args: Any,
    target: Path,
    wall_us: float | None,
    window: tuple[float, float] | None,
) -> Profile:
    """Export the trace, read it back with the server's samples of the cell's ``window``, and
    move it to ``target`` (a failure there is reported)."""
    with tempfile.TemporaryDirectory(prefix="jupyter-gpu-profile-") as folder:
        exported = Path(folder) / "trace.json"  # torch gzips a name ending in .gz
        profiler.export_chrome_trace(str(exported))
        with exported.open() as file:
            trace = json.load(file)
        activity = None if window is None else read_activity(*window, trace_devices(trace))
        result = analyse(trace, facts, sort=args.sort, top=args.top, activity=activity)
        result.wall_us = wall_us
        try:
            _place(exported, target)
            result.trace_path = str(target)
        except OSError as error:
            result.trace_error = f"{target}: {error.strerror or error}"
    return result


def _place(exported: Path, target: Path) -> None:
    """Put the trace at ``target`` without writing through anything planted there (a notebook's
    folder may be shared): a new file of our own beside it, then a rename, which replaces a
    symlink at ``target`` instead of following it. (``shutil.move`` across filesystems opens the
    destination, and so writes through a link into whatever file it names.)"""
    # A prefix of its own: ".<name>." would push a name near the 255-byte limit past it.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".jupyter-gpu-trace.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, exported.open("rb") as src:
            shutil.copyfileobj(src, out)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def register(ipython: InteractiveShell) -> Callable[[], None]:
    magics = ProfileMagics(ipython)
    ipython.register_magics(magics)
    return lambda: unregister_magics(ipython, magics)
