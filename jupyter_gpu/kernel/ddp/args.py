"""Arguments of the ddp magics.

argparse (through IPython's ``magic_arguments``, which turns parse errors into ``UsageError``)
checks the syntax; ``LaunchOptions``/``CellOptions`` check what argparse cannot, so every bad
input ends as one ``UsageError`` line instead of a traceback from deep inside torch.
"""
from __future__ import annotations

import argparse
import keyword
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, parse_argstring

F = TypeVar("F", bound=Callable[..., Any])

BACKENDS = ("auto", "nccl", "gloo")
AMP_DTYPES = ("bf16", "fp16")
START_METHODS = ("forkserver", "spawn")


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


@dataclass(frozen=True)
class CellOptions:
    """What one cell sends and gets back."""

    push: tuple[str, ...] = ()
    return_name: str | None = None
    timeout: float | None = None
    output: tuple[int, ...] | None = (0,)  # global ranks shown; None = all, () = none


def _bundle(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply several ``@argument`` decorators as one, keeping their order in ``--help``."""

    def apply(func: F) -> F:
        for decorate in reversed(decorators):
            func = decorate(func)
        return func

    return apply


worker_arguments = _bundle(
    argument("-n", "--nproc", type=int, default=None,
             help="ranks on this node (default: the number of --gpus)"),
    argument("--backend", choices=BACKENDS, default="auto",
             help="process group backend; auto = nccl when the rank sees a GPU, else gloo"),
    argument("--gpus", default=None, help="comma-separated GPU indices, rank k uses the k-th"),
    argument("--amp", choices=AMP_DTYPES, default=None, help="run cells under torch.autocast"),
    argument("--nnodes", type=int, default=1, help="nodes taking part (multi-node)"),
    argument("--node-rank", type=int, default=None,
             help="this node's rank: static rendezvous instead of c10d"),
    argument("--rdzv-endpoint", default=None, help="host:port of the rendezvous (multi-node)"),
    argument("--start-method", choices=START_METHODS, default="forkserver",
             help="forkserver (default: a clean server with torch imported forks ranks fast) "
                  "or spawn"),
)

cell_arguments = _bundle(
    argument("--push", default="", help="comma-separated notebook names sent to every rank"),
    argument("--return", dest="return_name", default=None,
             help="name whose value every rank sends back into _ddp (rank -> value)"),
    argument("--timeout", type=float, default=None, help="seconds before the ranks are stopped"),
    argument("--output", default="0", help="ranks whose output is shown: 0, 0,1, all or none"),
)


def parse(func: Callable[..., Any], line: str) -> argparse.Namespace:
    """Parse ``line`` with the parser ``magic_arguments`` attached to ``func``."""
    return parse_argstring(func, line)


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
    if nproc is None:
        raise UsageError("give the number of ranks with -n N (or the GPUs with --gpus 0,1)")
    if nproc < 1:
        raise UsageError(f"-n must be at least 1, got {nproc}")
    if gpus is not None and nproc > len(gpus):
        raise UsageError(f"-n {nproc} needs {nproc} GPUs but --gpus lists {len(gpus)}")
    if ns.nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {ns.nnodes}")
    if ns.nnodes > 1 and ns.rdzv_endpoint is None:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint host:port, the same on every node")
    if ns.node_rank is not None and not 0 <= ns.node_rank < ns.nnodes:
        raise UsageError(f"--node-rank must be in 0..{ns.nnodes - 1}, got {ns.node_rank}")
    if ns.node_rank is not None and ns.rdzv_endpoint is None:
        raise UsageError("--node-rank needs --rdzv-endpoint host:port of node 0")
    return WorkerOptions(
        nproc=nproc,
        backend=ns.backend,
        gpus=gpus,
        amp=ns.amp,
        nnodes=ns.nnodes,
        node_rank=ns.node_rank,
        rdzv_endpoint=_endpoint(ns.rdzv_endpoint) if ns.rdzv_endpoint else None,
        start_method=ns.start_method,
    )


def cell_options(ns: argparse.Namespace, world_size: int, default_return: str | None) -> CellOptions:
    """Check the per-cell arguments against the world they will run in."""
    push = tuple(_name(p.strip(), "--push") for p in ns.push.split(",") if p.strip())
    if ns.output.strip() == "all":
        output = None
    elif ns.output.strip() == "none":
        output = ()
    else:
        output = _int_list(ns.output, "--output")
        too_big = [r for r in output if r >= world_size]
        if too_big:
            raise UsageError(f"--output lists rank {too_big[0]} but there are {world_size} ranks")
    if ns.timeout is not None and ns.timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {ns.timeout}")
    return_name = ns.return_name if ns.return_name is not None else default_return
    return CellOptions(
        push=push,
        return_name=_name(return_name, "--return") if return_name is not None else None,
        timeout=ns.timeout,
        output=output,
    )


def names(line: str, what: str) -> tuple[str, ...]:
    """Names for ``%ddp_push``/``%ddp_pull``: space- or comma-separated Python names."""
    found = tuple(_name(n, what) for n in line.replace(",", " ").split())
    if not found:
        raise UsageError(f"{what} needs at least one name")
    return found
