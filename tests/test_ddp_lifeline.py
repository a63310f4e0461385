"""``lifeline.dies_with_parent``: a program that the kernel starts and that is not ours (srun of a
``--slurm`` launch) gets a signal the moment the kernel dies, SIGKILL included; one started
without it lives on. No Slurm needed: the Slurm tests show srun's step ending by it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
from support.ddp_kernel import wait_gone
from support.paths import ROOT

KERNEL = textwrap.dedent("""\
    import signal, subprocess, time
    from jupyter_gpu.ddp.lifeline import dies_with_parent
    guarded = subprocess.Popen(["sleep", "600"], preexec_fn=dies_with_parent(signal.SIGTERM))
    free = subprocess.Popen(["sleep", "600"])
    print(guarded.pid, free.pid, flush=True)
    time.sleep(600)
""")


def test_the_child_gets_sigterm_when_the_kernel_is_killed_and_a_plain_child_does_not() -> None:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True, env=env)
    assert kernel.stdout is not None
    guarded, free = map(int, kernel.stdout.readline().split())
    try:
        assert wait_gone([guarded, free], 0) == [guarded, free]  # both run while the kernel does
        kernel.kill()
        kernel.wait()
        assert wait_gone([guarded], 10) == []
        assert psutil.Process(free).status() != psutil.STATUS_ZOMBIE
    finally:
        for pid in (guarded, free):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
