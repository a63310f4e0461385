"""What ``%gpu_warmup`` reads to choose what to warm (``warmup_choice.choose``): the notebook's
own code cells, the cells this kernel has run, and the modules and optimizers it holds.

jupyter_server starts a notebook's kernel with ``JPY_SESSION_NAME`` set to the notebook's path
(ipykernel also puts it in ``__session__``). Reading is bounded and never fails: a notebook that
is too large, unreadable or not JSON is left out, and the choice says what was looked at.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

MAX_NOTEBOOK_BYTES = 8 << 20  # a notebook with images can be large; its code is a small part
MAX_TEXT = 1 << 20  # characters of history read, newest kept
MAX_OBJECTS = 2000  # namespace values looked at
MAX_MODULES = 5000  # submodules walked, over all models


def sources(ipython: Any) -> dict[str, str]:
    """Where -> text, for ``choose``: the notebook (by its file name), this kernel's cells and
    objects; empty texts are left out, but the places looked at are kept for the report."""
    found: dict[str, str] = {}
    notebook = _notebook_path(ipython)
    if notebook is not None:
        found[notebook.name] = notebook_code(notebook)
    found["this kernel's cells"] = _history(ipython)
    objects = _objects(ipython)
    if objects:
        found["this kernel's objects"] = objects
    return found


def _notebook_path(ipython: Any) -> Path | None:
    session = ipython.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME")
    if not isinstance(session, str) or not session.endswith(".ipynb") or not os.path.isabs(session):
        return None  # a relative name would be read from wherever the kernel has moved to
    return Path(session)


def notebook_code(path: Path) -> str:
    """The notebook's code cells, joined; '' when it cannot be read within the bounds."""
    try:
        # opened once, without blocking, and checked as opened: a FIFO or device named .ipynb,
        # or one swapped in after a check, would block the read or never end
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ""
            data = file.read(MAX_NOTEBOOK_BYTES + 1)
        if len(data) > MAX_NOTEBOOK_BYTES:
            return ""
        cells = json.loads(data).get("cells", [])
        return "\n".join(
            c["source"] if isinstance(c["source"], str) else "".join(c["source"])
            for c in cells
            if isinstance(c, dict) and c.get("cell_type") == "code"
        )
    except Exception:  # missing, half-written, not a notebook: the kernel's own cells still count
        return ""


def _history(ipython: Any) -> str:
    cells = getattr(getattr(ipython, "history_manager", None), "input_hist_raw", None) or []
    return "\n".join(str(cell) for cell in cells)[-MAX_TEXT:]


def _objects(ipython: Any) -> str:
    """Class names of the modules, optimizers and scalers in the user's namespace, with the dtype
    of each model's first parameter and the optimizers' fused/foreach settings, as code says them."""
    torch = sys.modules.get("torch")
    if torch is None:
        return ""
    names: list[str] = []
    budget = MAX_MODULES
    try:
        for value in list(ipython.user_ns.values())[:MAX_OBJECTS]:
            if isinstance(value, torch.nn.Module):
                for module in value.modules():
                    names.append(type(module).__name__)
                    budget -= 1
                    if budget <= 0:
                        break
                first = next(value.parameters(), None)
                if first is not None:
                    names.append(str(first.dtype))
            elif isinstance(value, torch.optim.Optimizer):
                names.append(
                    f"optim.{type(value).__name__}(fused={value.defaults.get('fused')}, foreach={value.defaults.get('foreach')})"
                )
            elif type(value).__name__ == "GradScaler":
                names.append("GradScaler")
    except Exception:  # a module that fails to list itself: what was read so far still counts
        pass
    return " ".join(names)
