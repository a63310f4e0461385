"""What ``%load_ext jupyter_gpu`` adds to a shell, and how ``%unload_ext`` takes it all back.

Each feature module exposes ``register(ipython) -> Callable[[], None]``: it registers its magics
and event callbacks and returns the function that removes them. Modules are imported only here,
so ``import jupyter_gpu`` stays cheap and imports no torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics

# Order matters only for the order of help entries.
FEATURES: tuple[str, ...] = (
    "jupyter_gpu.kernel.agent",
    "jupyter_gpu.kernel.timeline",
    "jupyter_gpu.kernel.free_cache",
    "jupyter_gpu.kernel.memory_magic",
    "jupyter_gpu.kernel.oom",
    "jupyter_gpu.kernel.amp",
    "jupyter_gpu.kernel.warmup_magic",
    "jupyter_gpu.kernel.profile_magic",
    "jupyter_gpu.kernel.plan.magic",
    "jupyter_gpu.kernel.doctor_magic",
    "jupyter_gpu.kernel.ddp.magics",
    "jupyter_gpu.kernel.monitor",
)

_undo: dict[int, list[Callable[[], None]]] = {}


def load(ipython: InteractiveShell) -> None:
    """Register every feature once per shell; a second ``%load_ext`` is a no-op."""
    if id(ipython) in _undo:
        return
    undo: list[Callable[[], None]] = []
    _undo[id(ipython)] = undo
    for name in FEATURES:
        undo.append(importlib.import_module(name).register(ipython))


def unload(ipython: InteractiveShell) -> None:
    """Remove every magic and event callback the features added, newest first."""
    for remove in reversed(_undo.pop(id(ipython), [])):
        remove()


def cell_number(ipython: InteractiveShell) -> int:
    """The n of ``In[n]`` for the cell running now, as IPython's own tracebacks name it.

    ``execution_count`` is not it while a cell runs: IPython 9 counts the next cell from the
    moment this one starts, IPython 8 only when it ends. The running cell's result has its own.
    """
    result = getattr(ipython.displayhook, "exec_result", None)
    number = getattr(result, "execution_count", None)
    return number if isinstance(number, int) else ipython.execution_count


class ShellMagics(Magics):
    """Magics registered on a shell, so ``shell`` is never None once they run.

    IPython types ``Magics.shell`` as ``None`` (8.x) or optional (9.x); this is the one place
    that says so, for both.
    """

    @property
    def ipython(self) -> InteractiveShell:
        shell = self.shell
        if shell is None:
            raise RuntimeError(f"{type(self).__name__} is not registered on a shell")
        return shell


def unregister_magics(ipython: InteractiveShell, magics: Magics) -> None:
    """Remove the magics of one ``Magics`` instance (IPython has no public call for this)."""
    manager: Any = ipython.magics_manager
    tables = cast(dict[str, dict[str, Any]], magics.magics)  # IPython 8 types it as None
    for kind, table in tables.items():
        for name in table:
            manager.magics[kind].pop(name, None)
    manager.registry.pop(type(magics).__name__, None)
