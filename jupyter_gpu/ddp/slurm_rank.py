"""Entry point of a rank that srun started (``%%ddp_launch --slurm``): Slurm's task ids become
torch's RANK, LOCAL_RANK and WORLD_SIZE, the kernel's ``WorkerConfig`` comes from the
environment (never the command line: ``ps`` shows those to every user), and from then on it is
a rank like any other (``worker.main``)."""

from __future__ import annotations

import base64
import os
import pickle

from .protocol import WorkerConfig

CONFIG_ENV = "JUPYTER_GPU_DDP_CONFIG"
# Written by a rank to its stdout and stderr before each reply: srun forwards output on a path of
# its own, slower than the reply, and the kernel shows a cell's output once it has seen this mark.
REPLIED_MARK = "\x1ejupyter_gpu replied "


def mark_replied(seq: int) -> None:
    """Say on both streams (flushed already) that the output of command ``seq`` is all written."""
    for fd in (1, 2):
        os.write(fd, f"{REPLIED_MARK}{seq}\n".encode())


def encode(config: WorkerConfig) -> str:
    """``config`` (with the channel's key) as the value of ``CONFIG_ENV`` in srun's environment."""
    return base64.b64encode(pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def main() -> None:
    # Taken out of os.environ, so processes the cell starts do not inherit the key; the process's
    # initial environment in /proc/<pid>/environ keeps it, readable by this uid and root only.
    config: WorkerConfig = pickle.loads(base64.b64decode(os.environ.pop(CONFIG_ENV)))
    env = os.environ
    env.update(
        {
            "RANK": env["SLURM_PROCID"],
            "LOCAL_RANK": env["SLURM_LOCALID"],
            "WORLD_SIZE": env["SLURM_NTASKS"],
            "LOCAL_WORLD_SIZE": str(config.options.nproc),
            "GROUP_RANK": env["SLURM_NODEID"],
            "GROUP_WORLD_SIZE": str(config.options.nnodes),
        }
    )
    from . import worker

    worker.main(config)


if __name__ == "__main__":
    main()
