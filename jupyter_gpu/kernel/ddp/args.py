"""Arguments of the ddp magics.

argparse (through IPython's ``magic_arguments``, which turns parse errors into ``UsageError``)
checks the syntax; ``LaunchOptions``/``CellOptions`` check what argparse cannot, so every bad
input ends as one ``UsageError`` line instead of a traceback from deep inside torch.
"""

from __future__ import annotations

import argparse
import keyword
import os
from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from ...ddp.abort import SECRET_ENV, shared_secret
from ...ddp.options import CellOptions, WorkerOptions
from ...doctor import no_gpu_reason
from ...nvml.visible import visible_gpus
from .. import magic_args

F = TypeVar("F", bound=Callable[..., Any])

BACKENDS = ("auto", "nccl", "gloo")
DEVICES = ("auto", "cuda", "cpu")
AMP_DTYPES = ("bf16", "fp16")
START_METHODS = ("forkserver", "spawn")
# Ranks per node: the biggest GPU nodes have 8-16 GPUs, and the forkserver hands each new rank
# every open pipe of its peers in one message (~120 ranks make "too many fds"). A CPU-only gang
# gets one rank per core; more only oversubscribe it.
MAX_RANKS_PER_NODE = 64
# A week: longer is no timeout at all, and inf/nan would make the cell never return.
MAX_TIMEOUT_S = 7 * 24 * 3600.0


def _bundle(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply several ``@argument`` decorators as one, keeping their order in ``--help``."""

    def apply(func: F) -> F:
        for decorate in reversed(decorators):
            func = decorate(func)
        return func

    return apply


worker_arguments = _bundle(
    argument(
        "-n", "--nproc", type=int, default=None, help="ranks on this node (default: the number of --gpus)"
    ),
    argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="process group backend; auto = nccl when the rank sees a GPU, else gloo",
    ),
    argument("--gpus", default=None, help="comma-separated GPU indices, rank k uses the k-th"),
    argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where the ranks compute; auto = a GPU per rank, or the CPU with --backend gloo "
        "and more ranks than GPUs",
    ),
    argument(
        "--fsdp",
        action="store_true",
        help="bind a device mesh `mesh` and `shard(model)` (FSDP2's fully_shard per layer and "
        "root) in the ranks, and show each rank's memory after every cell",
    ),
    argument("--amp", choices=AMP_DTYPES, default=None, help="run cells under torch.autocast"),
    argument(
        "--nnodes",
        "--nodes",
        type=int,
        default=None,
        help="nodes taking part (multi-node; with --slurm: default every node of the job)",
    ),
    argument(
        "--slurm",
        action="store_true",
        help="inside a Slurm allocation: srun starts -n ranks (default: the job's GPUs per node) "
        "on each node of the job",
    ),
    argument(
        "--alloc",
        type=magic_args.quoted_text,
        default=None,
        metavar="SALLOC_OPTIONS",
        help="with --slurm from a login node: ask Slurm for an allocation (salloc --no-shell "
        'with these options, e.g. "--nodes=2 --time=30"), kept until %%ddp_stop',
    ),
    argument(
        "--node-rank", type=int, default=None, help="this node's rank: static rendezvous instead of c10d"
    ),
    argument("--rdzv-endpoint", default=None, help="host:port of the rendezvous (multi-node)"),
    argument(
        "--start-method",
        choices=START_METHODS,
        default="forkserver",
        help="forkserver (default: a clean server with torch imported forks ranks fast) or spawn",
    ),
)

cell_arguments = _bundle(
    argument("--push", default="", help="comma-separated notebook names sent to every rank"),
    argument(
        "--return",
        dest="return_name",
        default=None,
        help="name whose value every rank sends back into _ddp (rank -> value)",
    ),
    argument("--timeout", type=float, default=None, help="seconds before the ranks are stopped"),
    argument("--output", default="0", help="ranks whose output is shown: 0, 0,1, all or none"),
)

checkpoint_arguments = _bundle(
    argument(
        "path",
        type=magic_args.quoted_path,
        help="the checkpoint's folder (DCP writes one file per rank and .metadata)",
    ),
    argument("--model", required=True, help="name of the model in the ranks' namespace"),
    argument("--optimizer", default="", help="name of its optimizer in the ranks' namespace"),
)


def parse(func: Callable[..., Any], line: str) -> argparse.Namespace:
    """Parse ``line`` with the parser ``magic_arguments`` attached to ``func``."""
    return magic_args.parse(func, line)


def max_ranks() -> int:
    """The most ranks one node may start: one per CPU core (at least 8), at most 64."""
    return min(MAX_RANKS_PER_NODE, max(8, os.cpu_count() or 1))


def _int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise UsageError(f"{what} is empty")
    if any(v < 0 for v in values):
        raise UsageError(f"{what} must not be negative, got {text!r}")
    if len(set(values)) != len(values):
        raise UsageError(f"{what} repeats an entry: {text!r}")
    return values


def _name(text: str, what: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise UsageError(f"{what}: {text!r} is not a Python name")
    return text


def _endpoint(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--rdzv-endpoint must be host:port with a port in 1..65535, got {text!r}")
    return text


def worker_options(ns: argparse.Namespace) -> WorkerOptions:
    """Check the worker arguments together (counts, GPU list, multi-node rules)."""
    gpus = _int_list(ns.gpus, "--gpus") if ns.gpus is not None else None
    nproc = ns.nproc if ns.nproc is not None else (len(gpus) if gpus else None)
    if ns.slurm:
        return _slurm_options(ns, nproc, gpus)
    if nproc is None:
        raise UsageError("give the number of ranks with -n N (or the GPUs with --gpus 0,1)")
    nproc = _ranks_per_node(nproc, gpus)
    nnodes = 1 if ns.nnodes is None else ns.nnodes
    if nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {nnodes}")
    if nnodes > 1 and ns.rdzv_endpoint is None:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint host:port, the same on every node")
    if ns.node_rank is not None and not 0 <= ns.node_rank < nnodes:
        raise UsageError(f"--node-rank must be in 0..{nnodes - 1}, got {ns.node_rank}")
    if ns.node_rank is not None and ns.rdzv_endpoint is None:
        raise UsageError("--node-rank needs --rdzv-endpoint host:port of node 0")
    if ns.rdzv_endpoint is not None and shared_secret() is None:
        raise UsageError(
            f"--rdzv-endpoint needs {SECRET_ENV}: the same random value (32+ characters) in the "
            "environment of every node's kernel, which signs the commands and replies that cross "
            "the network; make one with: python -c 'import secrets; print(secrets.token_hex(32))'"
        )
    if ns.device == "cuda":
        _gpu_usable("--device cuda")
    device = rank_device(ns.device, ns.backend, nproc, len(gpus) if gpus is not None else visible_gpus())
    return _worker_options(
        ns,
        nproc,
        gpus,
        nnodes=nnodes,
        node_rank=ns.node_rank,
        rdzv_endpoint=_endpoint(ns.rdzv_endpoint) if ns.rdzv_endpoint else None,
        device=device,
    )


def _worker_options(
    ns: argparse.Namespace, nproc: int, gpus: tuple[int, ...] | None, **where: Any
) -> WorkerOptions:
    """The options every launch takes from its line as given; ``where`` the ranks run."""
    return WorkerOptions(
        nproc=nproc,
        backend=ns.backend,
        gpus=gpus,
        amp=ns.amp,
        start_method=ns.start_method,
        fsdp=ns.fsdp,
        **where,
    )


def _ranks_per_node(nproc: int, gpus: tuple[int, ...] | None) -> int:
    if nproc < 1:
        raise UsageError(f"-n must be at least 1, got {nproc}")
    if nproc > max_ranks():
        raise UsageError(
            f"-n {nproc}: at most {max_ranks()} ranks per node here (one per CPU core, at least 8, "
            f"never more than {MAX_RANKS_PER_NODE}: each rank is a process with its own torch); "
            "use more nodes for more ranks"
        )
    if gpus is not None and nproc > len(gpus):
        raise UsageError(f"-n {nproc} needs {nproc} GPUs but --gpus lists {len(gpus)}")
    return nproc


def _slurm_options(ns: argparse.Namespace, nproc: int | None, gpus: tuple[int, ...] | None) -> WorkerOptions:
    """``--slurm``: the job's nodes (``--nodes K``: its first K) and GPUs per node say the size."""
    from ...ddp import slurm

    if ns.rdzv_endpoint is not None or ns.node_rank is not None:
        raise UsageError(
            "--slurm finds the nodes and the rendezvous itself: leave out --rdzv-endpoint and --node-rank"
        )
    try:
        job = slurm.allocation()
    except slurm.SlurmError as exc:
        raise UsageError(str(exc)) from None
    nodes = len(job.nodes) if ns.nnodes is None else ns.nnodes
    if not 1 <= nodes <= len(job.nodes):
        raise UsageError(
            f"--nodes {nodes}: job {job.job_id} has {len(job.nodes)} nodes ({','.join(job.nodes)})"
        )
    gpus_here = len(gpus) if gpus is not None else slurm.gpus_per_node()
    if nproc is None:
        nproc = gpus_here
        if nproc == 0:
            raise UsageError(f"job {job.job_id} has no GPUs: give the ranks per node with -n N")
    nproc = _ranks_per_node(nproc, gpus)
    return _worker_options(
        ns, nproc, gpus, nnodes=nodes, device=rank_device(ns.device, ns.backend, nproc, gpus_here), slurm=True
    )


def alloc_request(ns: argparse.Namespace) -> tuple[str, ...] | None:
    """``--alloc``'s salloc options, checked; None without ``--alloc``."""
    if ns.alloc is None:
        return None
    if not ns.slurm:
        raise UsageError("--alloc asks Slurm for the nodes that --slurm runs on: add --slurm")
    from ...ddp.slurm_alloc import salloc_options

    return salloc_options(ns.alloc)


def _gpu_usable(option: str) -> None:
    """``option`` asks for GPUs: without one, the doctor's reason now, not ranks that quietly
    compute on the CPU. Torch is asked (and its doctor run) only when the driver shows none."""
    reason = no_gpu_reason() if visible_gpus() == 0 else None
    if reason is not None:
        raise UsageError(f"{option}: {reason} (%gpu_doctor says how to fix it; --device cpu runs on the CPU)")


def rank_device(device: str, backend: str, nproc: int, gpus_here: int) -> str:
    """ "cpu" when the ranks must compute on the CPU, else "auto" (each rank takes its GPU).

    gloo with more ranks than GPUs runs every rank on the CPU, so a workshop can teach DDP and
    FSDP with 4 ranks on a one-GPU laptop; every rank on the same kind of device, as a mesh needs.
    """
    if device == "cpu":
        if backend == "nccl":
            raise UsageError("--device cpu needs --backend gloo (or auto): NCCL runs on GPUs only")
        return "cpu"
    if device == "cuda":
        if backend == "gloo" and nproc > gpus_here:
            raise UsageError(f"--device cuda: -n {nproc} needs {nproc} GPUs and this node shows {gpus_here}")
        return "auto"
    return "cpu" if backend == "gloo" and nproc > gpus_here else "auto"


def device_note(options: WorkerOptions, ns: argparse.Namespace) -> str | None:
    """What to tell the user when ``rank_device`` put GPU-less ranks on the CPU unasked."""
    gpus_here = visible_gpus() if options.gpus is None else len(options.gpus)
    if options.device != "cpu" or ns.device == "cpu" or gpus_here == 0:
        return None
    shown = f"{gpus_here} GPU{'s' if gpus_here != 1 else ''}"
    return (
        f"note: {options.nproc} ranks and {shown} here, so every rank runs on the CPU with gloo "
        "(--device cpu says so outright)"
    )


def cell_options(ns: argparse.Namespace, world_size: int, default_return: str | None) -> CellOptions:
    """Check the per-cell arguments against the world they will run in."""
    push = tuple(_name(p.strip(), "--push") for p in ns.push.split(",") if p.strip())
    output: tuple[int, ...] | None
    if ns.output.strip() == "all":
        output = None
    elif ns.output.strip() == "none":
        output = ()
    else:
        output = _int_list(ns.output, "--output")
        too_big = [r for r in output if r >= world_size]
        if too_big:
            raise UsageError(f"--output lists rank {too_big[0]} but there are {world_size} ranks")
    if ns.timeout is not None and not (0 < ns.timeout <= MAX_TIMEOUT_S):  # also refuses nan
        raise UsageError(
            f"--timeout must be a number of seconds between 0 and {MAX_TIMEOUT_S:g} "
            f"(a week), got {ns.timeout}"
        )
    return_name = ns.return_name if ns.return_name is not None else default_return
    return CellOptions(
        push=push,
        return_name=_name(return_name, "--return") if return_name is not None else None,
        timeout=ns.timeout,
        output=output,
    )


def checkpoint_names(ns: argparse.Namespace) -> tuple[str, str]:
    """(model, optimizer or "") of ``%ddp_save``/``%ddp_load``, checked as Python names."""
    return _name(ns.model, "--model"), _name(ns.optimizer, "--optimizer") if ns.optimizer else ""


def names(line: str, what: str) -> tuple[str, ...]:
    """Names for ``%ddp_push``/``%ddp_pull``: space- or comma-separated Python names."""
    found = tuple(_name(n, what) for n in line.replace(",", " ").split())
    if not found:
        raise UsageError(f"{what} needs at least one name")
    return found
