"""The one in-process IPython shell of the test session, for tests of magics and hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from IPython.core.getipython import get_ipython
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython


def shared_shell() -> InteractiveShell:
    """The one test shell; globalipapp returns it only from its first start."""
    return start_ipython() or get_ipython()


def shell_with(*registers: Callable[[InteractiveShell], Callable[[], None]]) -> Iterator[InteractiveShell]:
    """For a fixture: the shared shell with these magics or hooks registered, then removed."""
    shell = shared_shell()
    undo = [register(shell) for register in registers]
    yield shell
    for remove in undo:
        remove()
