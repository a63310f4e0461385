"""Run a cell magic's body so that its errors stay ordinary IPython errors.

``shell.run_cell`` from inside a magic would print the inner traceback but report the outer cell
as successful, so "Run all" would carry on past a failed cell. Executing the transformed source
here instead lets the exception reach the outer cell like any other error.
"""

from __future__ import annotations

import ast
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from .extension import cell_number


def run_source(shell: InteractiveShell, source: str) -> Any:
    """Execute IPython source in the user namespace; return the value of a trailing expression.

    The source is cached one line down, so tracebacks show the same line numbers as the
    notebook cell, whose first line is the magic itself. Top-level ``await`` is not supported.
    """
    __tracebackhide__ = True  # noqa: F841 -- IPython hides this frame from tracebacks
    padded = "\n" + shell.transform_cell(source)
    filename = shell.compile.cache(padded, cell_number(shell), raw_code="\n" + source)
    tree = shell.transform_ast(shell.compile.ast_parse(padded, filename=filename))
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(shell.compile(tree, filename, "exec"), shell.user_ns)
    if last is None:
        return None
    return eval(shell.compile(ast.Expression(last.value), filename, "eval"), shell.user_ns)
