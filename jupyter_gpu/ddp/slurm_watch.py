"""The login node's guard for an allocation that ``--alloc`` holds: a process of its own that
waits for the kernel to end, however it ends (SIGKILL too), and then cancels the job, retrying
while slurmctld does not answer. It runs in a session of its own, from "/", with nothing on its
command line but the kernel's pid and the job id; nothing of ours runs on the compute nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from .lifeline import wait_for_exit
from .slurm import JOB_NAME, QUERY_TIMEOUT_S

STOP_S = 10.0  # the watcher ends within a second of SIGTERM
CANCEL_TRIES = 20  # scancel, 3 s apart: slurmctld may be restarting
CANCEL_RETRY_S = 3.0


def cancel(job: str) -> str | None:
    """``scancel job``: None when done, else why not, in scancel's words."""
    try:
        done = subprocess.run(  # only a job of ours by that name, whatever the id says
            ["scancel", "--me", f"--name={JOB_NAME}", job],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return (done.stderr.strip() or f"exit code {done.returncode}") if done.returncode else None


def start_watcher(job: str) -> subprocess.Popen[bytes]:
    """``python -m jupyter_gpu.ddp.slurm_watch KERNEL_PID JOB``, in a session of its own so that
    neither an interrupt nor a kill of the kernel's process group reaches it."""
    root = str(Path(__file__).resolve().parents[2])  # where it imports this package from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", __name__, str(os.getpid()), job]
    # cwd "/": `python -m` imports from its working directory first, and a notebook's folder
    # may be shared
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True, cwd="/")


def stop_watcher(watcher: subprocess.Popen[bytes]) -> None:
    watcher.terminate()
    try:
        watcher.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.wait()


def _watch(argv: Iterable[str]) -> None:
    """The watcher: once the kernel has exited, cancel its job (retrying while slurmctld does
    not answer)."""
    kernel_pid, job = argv
    wait_for_exit(int(kernel_pid))
    for _ in range(CANCEL_TRIES):
        if cancel(job) is None:
            return
        time.sleep(CANCEL_RETRY_S)


if __name__ == "__main__":
    _watch(sys.argv[1:])
