"""What this server adds to the environment of each kernel it starts: the per-kernel GPU memory
quota, as PyTorch's own allocator limit (``per_process_memory_fraction`` in
``PYTORCH_CUDA_ALLOC_CONF``), so that a cell going over it gets PyTorch's own out-of-memory error;
and the GPUs it is assigned (``CUDA_VISIBLE_DEVICES``, ``gpu_assignment``).

jupyter_server has no hook for a kernel's environment, but its kernel manager's ``start_kernel``
takes ``env`` (the session manager passes the server's environment plus ``JPY_SESSION_NAME``), and
a restart launches with the same arguments; ``install`` wraps that one method of the running
manager. The quota and who set it also reach the kernel, for its out-of-memory explanation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_core.utils import ensure_async

from ..analysis.alloc_conf import LIMIT_ENV, SOURCE_ENV, quota_fraction, with_memory_fraction
from .gpu_assignment import GpuAssigner

ALLOC_CONF_NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
MPS_LIMIT_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


@dataclass(frozen=True)
class Quota:
    """GPU memory each kernel of this server may hold through PyTorch."""

    limit_bytes: int
    source: str  # who set it, in words: the trait, or the environment the Hub's spawner gave
    gpu_total_bytes: tuple[int, ...]  # each GPU's memory
    # Also as NVIDIA MPS's hard limit, for kernels whose CUDA runs through an MPS control daemon.
    mps: bool = False

    def environment(self, env: Mapping[str, str], devices: Sequence[int] | None = None) -> dict[str, str]:
        """``env`` with the quota: in both allocator variables where the user set the newer one
        (which torch reads first), otherwise in ``PYTORCH_CUDA_ALLOC_CONF``. ``devices``: the
        memory of the devices the kernel was assigned (a MIG slice has its own), else every GPU."""
        fraction = quota_fraction(self.limit_bytes, devices or self.gpu_total_bytes)
        out = dict(env)
        for name in ALLOC_CONF_NAMES:
            if name == ALLOC_CONF_NAMES[0] or env.get(name):
                out[name] = with_memory_fraction(env.get(name), fraction)
        out[LIMIT_ENV] = str(self.limit_bytes)
        out[SOURCE_ENV] = self.source
        if self.mps:  # per CUDA device ordinal the kernel will see, in MiB (MPS takes M, G)
            mib = self.limit_bytes // 2**20
            seen = visible_count(out.get("CUDA_VISIBLE_DEVICES"), len(self.gpu_total_bytes))
            out[MPS_LIMIT_ENV] = ",".join(f"{i}={mib}M" for i in range(seen))
        return out


def visible_count(visible: str | None, gpus: int) -> int:
    """How many devices CUDA numbers for a process with this ``CUDA_VISIBLE_DEVICES``: those listed
    (renumbered from 0), every GPU when it is unset."""
    if visible is None:
        return gpus
    return len([d for d in visible.split(",") if d.strip()])


def install(kernel_manager: Any, quota: Quota | None, assigner: GpuAssigner | None) -> None:
    """Every kernel ``kernel_manager`` starts from now on gets the quota and its GPUs."""
    start = kernel_manager.start_kernel

    async def start_kernel(*args: Any, **kwargs: Any) -> str:
        given = kwargs.get("env")
        env = dict(os.environ if given is None else given)
        picked = await assigner.pick(env) if assigner is not None else None
        if picked is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(picked[1])
        if quota is not None:
            env = quota.environment(env, assigner.memory_of(picked[1]) if assigner and picked else None)
        started: str | None = None
        try:
            started = kernel_id = await ensure_async(start(*args, **{**kwargs, "env": env}))
        finally:
            if assigner is not None and picked is not None:
                assigner.started(picked[0], started)
        return kernel_id

    kernel_manager.start_kernel = start_kernel
