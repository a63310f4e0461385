"""Living with torch.distributed.elastic inside a notebook kernel: its logs, its signal
handlers, and the loopback interface that keeps a one-node gang off the network."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator

_HANDLED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
_NOISY_LOGGERS = ("torch.distributed.elastic", "torch.multiprocessing")


def loopback_interface() -> str:
    """The network interface that holds 127.0.0.1 (``lo`` almost everywhere), for gloo and NCCL."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return "lo"


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """Silence elastic's own log lines (it logs every failure and teardown; we report them)."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(_NOISY_LOGGERS)]
    loggers = [logging.getLogger(n) for n in names]
    saved = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    finally:
        for lg, was in zip(loggers, saved):
            lg.disabled = was


@contextlib.contextmanager
def kept_signal_handlers() -> Iterator[None]:
    """``PContext.start`` installs handlers that raise ``SignalException``; keep the kernel's."""
    if sys.platform == "win32":
        yield
        return
    sigs = [getattr(signal, s) for s in _HANDLED_SIGNALS]
    saved = [signal.getsignal(s) for s in sigs]
    try:
        yield
    finally:
        for sig, handler in zip(sigs, saved):
            if handler is not None:
                signal.signal(sig, handler)
