"""A kernel started as a user starts one inside an allocation: ``salloc -N2 ... <kernel>`` in
the lab namespace of a ``SlurmCluster``, so ``SLURM_JOB_ID`` and ``SLURM_JOB_NODELIST`` are its
job's and ``srun`` works from it; or, without salloc arguments, as on a login node: in the lab
namespace, in no job. The test talks to it over jupyter_client's ``ipc`` transport (Unix
sockets by path cross network namespaces); the ddp magics are loaded."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from support.ddp_kernel import Kernel
from support.paths import ROOT
from support.slurm_cluster import SlurmCluster


class SlurmKernel(Kernel):
    """``salloc <salloc_args> -- python -m ipykernel_launcher`` in ``cluster``'s lab namespace;
    ``salloc_args`` None: the kernel alone, in no job (as on a login node; ``job`` is None).

    ``job_outlives_kernel``: salloc runs a shell that outlives the kernel (as a batch job's
    Jupyter server does), so the kernel's end does not end the job: whatever the kernel started
    in the job must end by itself. ``close()`` then cancels the job."""

    def __init__(
        self,
        cluster: SlurmCluster,
        salloc_args: list[str] | None,
        job_outlives_kernel: bool = False,
        **extra_env: str,
    ) -> None:
        # ipc socket paths have 107 bytes at most: a short folder of its own, not pytest's
        self.folder = Path(tempfile.mkdtemp(prefix="jgsk-", dir="/tmp"))
        self.cluster = cluster
        spec = self.folder / "kernels" / "slurm"
        spec.mkdir(parents=True)
        kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        if job_outlives_kernel:
            kernel = ["sh", "-c", '"$@"; exec sleep 3600', "sh", *kernel]
        salloc = [] if salloc_args is None else ["salloc", *salloc_args, "--"]
        argv = [*cluster.prefix(), *salloc, *kernel]
        spec.joinpath("kernel.json").write_text(
            # an interrupt as a message: a SIGINT to the process group would reach salloc too
            json.dumps(
                {"argv": argv, "display_name": "slurm", "language": "python", "interrupt_mode": "message"}
            )
        )
        self.job_outlives_kernel = job_outlives_kernel
        self.km = KernelManager(
            kernel_name="slurm",
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]),
            transport="ipc",
            ip=str(self.folder / "k"),
            connection_file=str(self.folder / "kernel.json"),
        )
        self.km.start_kernel(env=cluster.env({"PYTHONPATH": str(ROOT), **extra_env}), cwd=str(ROOT))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.iopub = []
        self.pid = self.km.provisioner.pid  # type: ignore[union-attr]
        self.run("from jupyter_gpu.kernel.ddp.magics import register; register(get_ipython())")
        job, kernel_pid = self.run(
            "import os; print(os.environ.get('SLURM_JOB_ID', '-'), os.getpid())"
        ).stdout.split()
        self.job: str | None = None if job == "-" else job
        self.kernel_pid = int(kernel_pid)  # the kernel itself, below salloc (and the shell)

    def steps(self) -> list[str]:
        """The job's steps that squeue shows (a launch's or a session's srun step while it runs)."""
        assert self.job is not None, "a kernel in no job has no steps"
        out = self.cluster.run(["squeue", "-h", "-s", "-j", self.job, "-o", "%i"]).stdout.split()
        return [step for step in out if re.fullmatch(rf"{self.job}\.\d+", step)]

    def params_in_sync(self) -> str:
        """'[0, 1, 2, 3] True' when ``_ddp`` maps every rank to the same parameters (a list of
        tensors each, as a DDP model's after training); the ranks found and False otherwise."""
        check = self.run(
            "import torch\nprint(sorted(_ddp), all(all(torch.equal(a, b) for a, b in zip(_ddp[0], p)) "
            "for p in _ddp.values()))"
        )
        return check.stdout.strip() or check.traceback

    def job_running(self) -> bool:
        assert self.job is not None, "a kernel in no job has no job to run"
        out = self.cluster.run(["squeue", "-h", "-j", self.job, "-o", "%T"], check=False).stdout
        return out.strip() == "RUNNING"

    def close(self) -> None:
        """Ask the kernel to exit (a dead one is fine), so salloc gives the allocation back; the
        cluster's stop() ends whatever is left."""
        self.kc.stop_channels()
        if self.job_outlives_kernel and self.job:  # the job ends the shell, salloc and the kernel, if alive
            self.cluster.run(["scancel", self.job], check=False)
        self.km.shutdown_kernel(now=self.job_outlives_kernel)
        shutil.rmtree(self.folder, ignore_errors=True)
