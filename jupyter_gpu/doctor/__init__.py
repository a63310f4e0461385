"""Why can't torch use a GPU here? ``diagnose()`` answers without creating a CUDA context.

Plain library code, used by ``%gpu_doctor`` (``kernel/doctor_magic.py``), ``jupyter gpu doctor``,
by the warm-up and preflight when there is nothing to warm, and by anything else that needs the
one-line verdict (the server may call it too). Importing this package imports neither torch nor
IPython, nor pynvml (whose absence is one of its findings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .check import Check, Status
from .diagnosis import Diagnosis, evaluate
from .facts import Facts, gather

__all__ = ["Check", "Diagnosis", "Facts", "Status", "diagnose", "evaluate", "gather", "no_gpu_reason"]


def diagnose(env: Mapping[str, str] | None = None, **seams: Any) -> Diagnosis:
    """Gather the facts (see ``gather`` for its seams) and check them.

    Blocks for a few seconds when torch must be asked in a child process (torch not yet imported
    here, or CUDA not yet initialised): call it off any event loop.
    """
    return evaluate(gather(env, **seams))


def no_gpu_reason() -> str | None:
    """None when torch can use a GPU in this process; otherwise the doctor's one-line verdict.

    For callers about to use CUDA anyway (a warm-up, the command line): it asks torch directly.
    """
    try:
        import torch
    except ImportError:
        pass
    else:
        if torch.cuda.is_available():
            return None
    return diagnose(allow_cuda_init=True, check_server=False).verdict
