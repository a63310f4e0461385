"""The options of a DDP launch or session: one type each, from the magic's parser to the ranks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerOptions:
    """How the ranks are started: fixed for the life of a launch or a persistent session."""

    nproc: int
    backend: str = "auto"
    gpus: tuple[int, ...] | None = None
    amp: str | None = None
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    start_method: str = "forkserver"
    device: str = "auto"  # "cpu": the ranks see no GPU (gloo on the CPU on a GPU machine)
    fsdp: bool = False
    slurm: bool = False  # srun starts nproc ranks on each of nnodes nodes of the kernel's allocation


@dataclass(frozen=True)
class CellOptions:
    """What one cell sends and gets back."""

    push: tuple[str, ...] = ()
    return_name: str | None = None
    timeout: float | None = None
    output: tuple[int, ...] | None = (0,)  # global ranks shown; None = all, () = none
