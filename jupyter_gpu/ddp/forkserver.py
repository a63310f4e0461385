"""The per-kernel forkserver that starts ranks: torch imported once, CUDA never touched.

The forkserver is a fresh interpreter (not a fork of the kernel), so it has never touched CUDA
even when the kernel has; importing torch there before it forks any rank makes a rank start in
~0.1 s instead of re-importing torch.
"""

from __future__ import annotations

import multiprocessing
import threading

_FORKSERVER_PRELOAD = [
    "torch",
    "torch.distributed",
    "torch.distributed.elastic.multiprocessing",
    "cloudpickle",
    "jupyter_gpu.ddp.worker",
]


def use_forkserver() -> None:
    """Make the (per-kernel) forkserver import torch before it forks any rank."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(_FORKSERVER_PRELOAD)


def prestart_forkserver() -> None:
    """Start the forkserver now, in the background: the first launch then takes ~0.1 s, not the
    2.6-4.8 s of importing torch. Only the forkserver imports torch; the kernel does not."""
    from multiprocessing import forkserver

    use_forkserver()
    threading.Thread(target=forkserver.ensure_running, name="ddp-forkserver", daemon=True).start()
