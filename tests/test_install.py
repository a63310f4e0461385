"""`pip install` alone enables both halves: the server extension and the prebuilt frontend."""
from __future__ import annotations

import re
import subprocess
import sys


def jupyter(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "jupyter", *args], capture_output=True, text=True, timeout=120)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)  # drop colour codes


def test_server_extension_is_enabled_and_loads():
    text = jupyter("server", "extension", "list")
    assert re.search(r"jupyter_gpu enabled", text), text
    assert re.search(r"jupyter_gpu \S+ OK", text), text


def test_prebuilt_labextension_is_enabled():
    text = jupyter("labextension", "list")
    assert re.search(r"jupyter-gpu v\S+ enabled\s+OK \(python, jupyter_gpu\)", text), text
