"""Make a rank die with the kernel that started it, even when the kernel is SIGKILLed.

Two independent guards: ``PR_SET_PDEATHSIG`` (Linux; fires when the *parent* dies, which is the
forkserver for forkserver-started ranks, and the forkserver exits when the kernel does) and a
daemon thread blocked on a pidfd of the kernel (falls back to polling where pidfds do not exist).
A program that is not ours (``srun`` of a ``--slurm`` launch) gets the first guard only, set
between fork and exec (``dies_with_parent``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's prctl, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _set_parent_death_signal() -> None:
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def dies_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn`` that has the child sent ``sig`` when its parent dies: srun gets SIGTERM
    (which cancels its job step) the moment the kernel is gone, SIGKILLed or not. Linux ties it
    to the parent *thread*: start the child from a thread that lives as long as the kernel (the
    one cells run on). libc is looked up here, so the child only makes the call."""
    prctl, parent = _prctl(), os.getpid()

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the kernel died before the guard was set
            with contextlib.suppress(OSError):
                os.kill(os.getpid(), sig)

    return preexec


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_for_exit(pid: int) -> None:
    """Return once ``pid`` has exited (at once when it already has)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        while _alive(pid):
            time.sleep(0.5)
    else:
        select.select([fd], [], [])  # readable once the process has exited
        os.close(fd)


def _watch(pid: int) -> None:
    wait_for_exit(pid)
    os._exit(70)


def bind_to_kernel(kernel_pid: int) -> None:
    """Exit this process as soon as ``kernel_pid`` is gone."""
    _set_parent_death_signal()
    threading.Thread(target=_watch, args=(kernel_pid,), name="ddp-lifeline", daemon=True).start()


def detach_from_terminal_signals() -> None:
    """Leave the kernel's process group, so a Jupyter interrupt reaches only the kernel.

    The magic decides what an interrupt means for the ranks (stop, or interrupt the cell).
    """
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader
