"""A kernel started as a user starts one inside an allocation: ``salloc -N2 ... <kernel>`` in
the lab namespace of a ``SlurmCluster``, so ``SLURM_JOB_ID`` and ``SLURM_JOB_NODELIST`` are its
job's and ``srun`` works from it; or, without salloc arguments, as on a login node: in the lab
namespace, in no job. The test talks to it over jupyter_client's ``ipc`` transport (Unix
sockets by path cross network namespaces); the ddp magics are loaded."""

from __future__ import annotations

import json
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
    with ``salloc_args`` None, the kernel alone (a login node's)."""

    def __init__(self, cluster: SlurmCluster, salloc_args: list[str] | None, **extra_env: str) -> None:
        # ipc socket paths have 107 bytes at most: a short folder of its own, not pytest's
        self.folder = Path(tempfile.mkdtemp(prefix="jgsk-", dir="/tmp"))
        spec = self.folder / "kernels" / "slurm"
        spec.mkdir(parents=True)
        salloc = ["salloc", *salloc_args, "--"] if salloc_args is not None else []
        argv = [*cluster.prefix(), *salloc, sys.executable, "-m", "ipykernel_launcher"]
        spec.joinpath("kernel.json").write_text(
            json.dumps(
                {"argv": [*argv, "-f", "{connection_file}"], "display_name": "slurm", "language": "python"}
            )
        )
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
        self.job = self.run("import os; print(os.environ.get('SLURM_JOB_ID', ''))").stdout.strip()

    def close(self) -> None:
        """Ask the kernel to exit, so salloc gives the allocation back; the cluster's stop()
        ends whatever is left."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        shutil.rmtree(self.folder, ignore_errors=True)
