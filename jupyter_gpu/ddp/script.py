"""``python -m jupyter_gpu.ddp.script KERNEL_PID SCRIPT [ARGS...]``: one rank of the line
form of ``%ddp_launch``. Runs SCRIPT as ``__main__`` the way ``torchrun`` would, but dies with
the kernel, leaves elastic's error file with a traceback that starts at the script, and takes
down the process group the script left up before the interpreter shuts down.
"""

from __future__ import annotations

import faulthandler
import json
import os
import runpy
import sys
import time

from .errors import capture, render
from .lifeline import bind_to_kernel

RELEASE_TIMEOUT = 2.0  # seconds a left-over process group may take to go before the rank exits


def _write_error_file(exc: BaseException, text: str) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))},
        }
    }
    with open(path, "w") as handle:
        json.dump(data, handle)


def _release_process_group() -> None:
    """Destroy the process group a script left up (it raised first, or never called
    ``destroy_process_group``), while the interpreter is still whole.

    Left up, its threads outlive the start of interpreter shutdown: one that then takes the GIL
    (to drop a collective's tensors, or to run a completion callback) is ended by Python inside
    a C++ destructor, and the rank dies of SIGABRT ("terminate called without an active
    exception") instead of exiting with its code. Destroying waits for collectives still
    pending on peers, so it is bounded: past ``RELEASE_TIMEOUT`` the rank leaves at once
    with code 1 (what it raised is already in stderr and the error file).
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    with open(os.devnull, "w") as devnull:
        faulthandler.dump_traceback_later(RELEASE_TIMEOUT, exit=True, file=devnull)
        try:
            dist.destroy_process_group()
        finally:
            faulthandler.cancel_dump_traceback_later()


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
    finally:
        _release_process_group()


if __name__ == "__main__":
    main()
