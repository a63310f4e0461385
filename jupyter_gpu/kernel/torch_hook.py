"""Run something once the notebook has imported torch: after the cell that imported it.

The kernel itself never imports torch (a notebook that does not use it pays nothing), so work
that needs torch anyway, such as starting the ranks' forkserver or a background warm-up, waits
for the user's own import and then starts at once, between that cell and the next.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell


def after_torch_import(ipython: InteractiveShell, start: Callable[[], None]) -> Callable[[], None]:
    """Call ``start`` once: now if torch is imported, else after the first cell that imports it.
    Returns the function that cancels it if it has not run yet."""

    def check(result: Any = None) -> None:
        if "torch" in sys.modules:
            cancel()
            start()

    def cancel() -> None:
        with contextlib.suppress(ValueError):  # already gone: torch came
            ipython.events.unregister("post_run_cell", check)

    ipython.events.register("post_run_cell", check)
    check()
    return cancel
