"""``python -m jupyter_gpu.kernel.ddp.script KERNEL_PID SCRIPT [ARGS...]``: one rank of the line
form of ``%ddp_launch``. Runs SCRIPT as ``__main__`` the way ``torchrun`` would, but dies with
the kernel, and leaves elastic's error file with a traceback that starts at the script.
"""
from __future__ import annotations

import json
import os
import runpy
import sys
import time

from .errors import capture, render
from .lifeline import bind_to_kernel


def _write_error_file(exc: BaseException, text: str) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": f"{type(exc).__name__}: {exc}",
                        "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))}}}
    with open(path, "w") as handle:
        json.dump(data, handle)


def main() -> None:
    kernel_pid, script, *rest = sys.argv[1:]
    bind_to_kernel(int(kernel_pid))
    script = os.path.abspath(script)
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(script)  # as `python script.py` would have it
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:
        err = capture(exc)
        while err.frames and err.frames[0].filename != script:
            err.frames.pop(0)  # runpy's frames
        text = "".join(render(err, "", ""))
        sys.stderr.write(text)
        sys.stderr.flush()
        _write_error_file(exc, text)
        sys.exit(1)


if __name__ == "__main__":
    main()
