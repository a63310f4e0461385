"""Checkpoints through ``torch.distributed.checkpoint`` (DCP): saved and loaded by the ranks,
loaded whole into the kernel.

DCP writes each rank's shards and one ``.metadata`` file (the shape and type of every tensor),
so a checkpoint saved from N ranks loads on M: each rank reads the pieces of its own shards.
Before a load, or before a save replaces an older checkpoint, the tensors' names and shapes are
compared with the model's, so the error names the mismatch instead of failing inside DCP.
``.metadata`` is a pickle: ``checkpoint_files.trusted`` has made sure it is the user's own.

The state is ``{"model": ..., "optimizer": ...}`` as ``torch.distributed.checkpoint.state_dict``
makes it: the names of the unwrapped model (no ``module.`` of DDP, no FSDP wrappers), so the
same checkpoint loads into DDP, FSDP2 and a plain model alike.

Our own agreement between the ranks is a tensor ``all_reduce``: nothing a peer sends is
unpickled by this module. DCP's planning does exchange pickles (``_DistWrapper`` in
``torch/distributed/checkpoint/utils.py``); the threat model (docs/security.md) says what that leaves.
"""

from __future__ import annotations

import errno
import math
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

MAX_LISTED = 3  # mismatches named in one error
MAX_CHAIN = 8  # causes followed down from an error
_NO_ROOM = {  # what a save that ran out of room says, by errno
    errno.ENOSPC: "the disk holding {} is full",
    errno.EDQUOT: "your quota on the disk holding {} is used up",
}


class Problem(Exception):
    """Why a save or load cannot go on, said in one line (nothing was written or changed).
    ``secondary``: this rank could have, another could not."""

    def __init__(self, text: str, secondary: bool = False) -> None:
        super().__init__(text)
        self.secondary = secondary


def prepared(step: Callable[[], T]) -> T:
    """Run a save's or load's own checks on this rank, then agree with every rank before DCP's
    collectives begin: a rank that stopped alone would leave the others waiting in them forever."""
    import torch
    import torch.distributed as dist

    problem: Problem | None = None
    try:
        value = step()
    except Problem as exc:
        problem = exc
    except Exception as exc:
        problem = Problem(one_line(exc))
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    every = torch.tensor([0 if problem else 1], device=on)
    dist.all_reduce(every, op=dist.ReduceOp.MIN)
    if problem is not None:
        raise problem
    if not every.item():
        raise Problem("another rank could not go on", secondary=True)
    return value


def _failures(exc: BaseException) -> list[BaseException]:
    """Each rank's own error under DCP's ``CheckpointException`` (``exc`` itself for others)."""
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, Mapping) or not failures:
        return [exc]
    inner = [
        f[0] for f in failures.values() if isinstance(f, tuple) and f and isinstance(f[0], BaseException)
    ]
    return inner or [exc]


def _os_error(exc: BaseException) -> OSError | None:
    """The ``OSError`` under an error, if there is one: a write that fails for a full disk
    surfaces as torch's ``RuntimeError('... unexpected pos ...')`` raised while handling it."""
    seen: BaseException | None = exc
    for _ in range(MAX_CHAIN):
        if seen is None or isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def one_line(exc: BaseException) -> str:
    """An error of DCP or torch as one line: DCP wraps each rank's failure in a
    ``CheckpointException`` whose text is a traceback, so the first rank's own error is taken
    (the operating system's error under torch's ``RuntimeError`` of a failed write)."""
    exc = _failures(exc)[0]
    if isinstance(exc, RuntimeError):
        exc = _os_error(exc) or exc
    text = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def objects(namespace: Mapping[str, Any], model_name: str, optimizer_name: str) -> tuple[Any, Any]:
    """The model and (optionally) optimizer the user named, checked for their kind."""
    import torch

    model = namespace.get(model_name)
    if not isinstance(model, torch.nn.Module):
        what = (
            "is not defined"
            if model_name not in namespace
            else f"is a {type(model).__name__}, not a torch.nn.Module"
        )
        raise Problem(f"--model {model_name}: {what}")
    optimizer = namespace.get(optimizer_name) if optimizer_name else None
    if optimizer_name and not isinstance(optimizer, torch.optim.Optimizer):
        what = (
            "is not defined"
            if optimizer_name not in namespace
            else f"is a {type(optimizer).__name__}, not a torch.optim.Optimizer"
        )
        raise Problem(f"--optimizer {optimizer_name}: {what}")
    return model, optimizer


def state_of(model: Any, optimizer: Any) -> dict[str, Any]:
    """DCP's view of the model (and optimizer): plain names, sharded tensors as they are."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def shapes(state: Mapping[str, Any], prefix: str = "") -> dict[str, tuple[int, ...]]:
    """Every tensor of a nested state, by DCP's flattened name ("model.layers.0.weight")."""
    import torch

    found: dict[str, tuple[int, ...]] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor):
            found[name] = tuple(value.shape)  # a DTensor's shape is the whole tensor's
        elif isinstance(value, Mapping):
            found.update(shapes(value, name + "."))
    return found


def stored_tensors(path: str | Path, prefix: str = "") -> dict[str, Any]:
    """Name -> ``TensorStorageMetadata`` (size, dtype) of each tensor a checkpoint holds under
    ``prefix``, from its ``.metadata`` (a pickle: ``checkpoint_files.trusted`` comes first)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(str(path)).read_metadata()
    return {
        name: meta
        for name, meta in metadata.state_dict_metadata.items()
        if name.startswith(prefix) and isinstance(meta, TensorStorageMetadata)
    }


def stored_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The tensors a checkpoint holds, by DCP's flattened name."""
    return {name: tuple(meta.size) for name, meta in stored_tensors(path).items()}


def mismatches(
    wanted: Mapping[str, tuple[int, ...]], stored: Mapping[str, tuple[int, ...]], part: str
) -> list[str]:
    """What keeps ``stored`` from filling ``wanted`` for the names under ``part`` ("model")."""
    head = part + "."
    ours = {k: v for k, v in wanted.items() if k.startswith(head)}
    theirs = {k: v for k, v in stored.items() if k.startswith(head)}
    found = [f"{k[len(head) :]} is missing" for k in sorted(ours.keys() - theirs.keys())]
    found += [
        f"{k[len(head) :]} is not in the {part}"
        for k in sorted(theirs.keys() - ours.keys())
        if part == "model"
    ]
    found += [
        f"{k[len(head) :]} is {_shape(theirs[k])} in the checkpoint, {_shape(ours[k])} in the {part}"
        for k in sorted(ours.keys() & theirs.keys())
        if ours[k] != theirs[k]
    ]
    return found


def _shape(size: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, size)) + "]"


def _say(found: list[str]) -> str:
    more = f" (and {len(found) - MAX_LISTED} more)" if len(found) > MAX_LISTED else ""
    return "; ".join(found[:MAX_LISTED]) + more


def check_fits(state: Mapping[str, Any], path: str | Path, what: str) -> None:
    """Raise ``Problem`` unless the checkpoint at ``path`` has this state's tensors and shapes."""
    wanted, stored = shapes(state), stored_shapes(path)
    found = mismatches(wanted, stored, "model")
    if found:
        raise Problem(f"{what}: {_say(found)}")
    if "optimizer" in state:
        if not any(k.startswith("optimizer.") for k in stored):
            raise Problem(f"{what}: it holds no optimizer state (saved without --optimizer)")
        found = mismatches(wanted, stored, "optimizer")
        if found:
            raise Problem(f"{what}: the optimizer's state differs: {_say(found)}")


def save(
    namespace: Mapping[str, Any], model_name: str, optimizer_name: str, path: str, replaces: str
) -> dict[str, Any]:
    """On every rank: write the named model (and optimizer) into the fresh folder ``path``.

    ``replaces``: the checkpoint this one will replace ("" for none), which must be one of
    the same model. Returns what rank 0 reports: tensors and their bytes in all."""
    import torch.distributed.checkpoint as dcp

    def check() -> dict[str, Any]:
        state = state_of(*objects(namespace, model_name, optimizer_name))
        if replaces:
            what = f"{replaces} holds a checkpoint of another model, left as it was"
            check_fits({"model": state["model"]}, replaces, what)
        return state

    state = prepared(check)
    free = _free(Path(path).parent)
    try:
        dcp.save(state, checkpoint_id=path)
    except dcp.CheckpointException as exc:  # a BaseException: the rank's handlers would miss it
        kept = f"the previous checkpoint at {replaces} is intact" if replaces else "nothing was written"
        raise Problem(f"{_why_not_saved(exc, path, free)}; {kept}") from None
    return {"tensors": len(shapes(state)), "bytes": _bytes(state)}


def _free(folder: Path) -> int | None:
    """Bytes an unprivileged user may still write where ``folder`` is, if the system says."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _mount_of(folder: Path) -> Path:
    """The top of the file system ``folder`` is on (where a user looks for what fills it)."""
    try:
        device = os.stat(folder).st_dev
        while folder.parent != folder and os.stat(folder.parent).st_dev == device:
            folder = folder.parent
    except OSError:
        pass
    return folder


def _why_not_saved(exc: BaseException, path: str, free: int | None) -> str:
    """A failed ``dcp.save`` in one line; a full disk (or quota) says which, and what was free."""
    from ..analysis.units import format_bytes

    for failure in _failures(exc):
        error = _os_error(failure)
        if error is not None and error.errno in _NO_ROOM:
            had = f"; {format_bytes(free)} were free when the save began" if free is not None else ""
            where = _NO_ROOM[error.errno].format(_mount_of(Path(path).parent))
            return f"{where} ({error.strerror}{had})"
    return f"the checkpoint could not be written: {one_line(exc)}"


def load(namespace: Mapping[str, Any], model_name: str, optimizer_name: str, path: str) -> dict[str, Any]:
    """On every rank: fill the named model (and optimizer) from the checkpoint at ``path``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    def check() -> tuple[Any, Any, dict[str, Any]]:
        model, optimizer = objects(namespace, model_name, optimizer_name)
        state = state_of(model, optimizer)  # an optimizer that never stepped gets its state here
        named = f"--model {model_name}" + (f" --optimizer {optimizer_name}" if optimizer_name else "")
        check_fits(state, path, f"{path} does not fit {named}")
        return model, optimizer, state

    model, optimizer, state = prepared(check)
    try:
        dcp.load(state, checkpoint_id=path)
    except dcp.CheckpointException as exc:  # a BaseException: the rank's handlers would miss it
        raise Problem(f"cannot load {path}: {one_line(exc)}") from None
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return {"tensors": len(shapes(state)), "bytes": _bytes(state)}


def _bytes(state: Mapping[str, Any]) -> int:
    import torch

    total = 0
    for value in state.values():
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()  # the whole tensor, also for a DTensor
        elif isinstance(value, Mapping):
            total += _bytes(value)
    return total


def stored_model_bytes(path: str | Path) -> int:
    """Bytes of the model's tensors in a checkpoint, whole (what loading it in one process takes)."""
    return sum(
        math.prod(meta.size) * meta.properties.dtype.itemsize
        for meta in stored_tensors(path, "model.").values()
    )


def load_local(path: str | Path, model: Any, device: str) -> dict[str, Any]:
    """In the kernel, without a process group: the checkpoint's model state, whole.

    With ``model``, its tensors are filled in place (a model on the meta device is first made
    real on ``device``); without, new tensors on ``device`` are made from the metadata."""
    import torch
    import torch.distributed.checkpoint as dcp

    if model is not None:
        if any(p.is_meta for p in model.parameters()) or any(b.is_meta for b in model.buffers()):
            model.to_empty(device=device)
        state = {"model": model.state_dict()}
        check_fits(state, path, f"{path} does not fit the model")
    else:
        state = {
            "model": {
                name[len("model.") :]: torch.empty(
                    tuple(meta.size), dtype=meta.properties.dtype, device=device
                )
                for name, meta in stored_tensors(path, "model.").items()
            }
        }
        if not state["model"]:
            raise Problem(f"{path} holds no model state")
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        try:
            dcp.load(state, checkpoint_id=str(path), no_dist=True)
        except dcp.CheckpointException as exc:  # a BaseException: a kernel's handlers would miss it
            raise Problem(f"cannot load {path}: {one_line(exc)}") from None
    if model is not None:
        model.load_state_dict(state["model"])
    return state["model"]
