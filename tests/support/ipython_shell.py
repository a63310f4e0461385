"""The one in-process IPython shell of the test session, for tests of magics and hooks."""

from __future__ import annotations

from IPython.core.getipython import get_ipython
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython


def shared_shell() -> InteractiveShell:
    """The one test shell; globalipapp returns it only from its first start."""
    return start_ipython() or get_ipython()
