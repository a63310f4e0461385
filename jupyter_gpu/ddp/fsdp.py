"""FSDP2 on the ranks: the device mesh, ``shard(model)``, and what each rank holds.

Runs inside the ranks only (``worker`` binds ``mesh`` and ``shard`` when the session was
started with ``--fsdp``); torch is imported inside the functions. ``shard`` is what a script
would write by hand around ``torch.distributed.fsdp.fully_shard``: every layer, then the root,
with the mixed-precision and offload policies spelled as short options.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

LayerSpec = type | tuple[type, ...] | Callable[[Any], bool] | None


class FSDPUnavailable(RuntimeError):
    """The ranks' backend or device cannot run FSDP2; the message says what to change."""


def make_mesh(device: Any, backend: str) -> Any:
    """A 1-D mesh over every rank, after checking the collectives FSDP2 is built on work here."""
    import torch
    import torch.distributed as dist

    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard  # noqa: F401  (FSDP2: public since torch 2.6)
    except ImportError:
        raise FSDPUnavailable(
            f"--fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard, torch 2.6 or later); "
            f"these ranks have torch {torch.__version__}"
        ) from None
    world = dist.get_world_size()
    probe = torch.ones(2, device=device)
    try:  # what every sharded forward and backward does: all-gather, then reduce-scatter
        gathered = torch.empty(2 * world, device=device)
        with warnings.catch_warnings():  # torch 2.13 renames both; FSDP2 itself calls what it has
            warnings.simplefilter("ignore", FutureWarning)
            dist.all_gather_into_tensor(gathered, probe)
            dist.reduce_scatter_tensor(probe, gathered)
    except (RuntimeError, NotImplementedError) as exc:
        where = "GPUs" if device.type == "cuda" else "the CPU"
        raise FSDPUnavailable(
            f"--fsdp: the {backend} backend cannot all-gather and reduce-scatter on {where} "
            f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}); "
            + ("use --backend nccl" if device.type == "cuda" else "use --backend gloo on the CPU")
        ) from None
    return init_device_mesh(device.type, (world,))


def layers_of(model: Any, layers: LayerSpec) -> list[Any]:
    """The submodules to shard one by one: those of the given type(s), those a callable picks, or
    by default the entries of every ``nn.ModuleList`` (a transformer's blocks)."""
    import torch.nn as nn

    if layers is None:
        return [m for parent in model.modules() if isinstance(parent, nn.ModuleList) for m in parent]
    if isinstance(layers, type) or (isinstance(layers, tuple) and all(isinstance(t, type) for t in layers)):
        return [m for m in model.modules() if m is not model and isinstance(m, layers)]
    if callable(layers):
        return [m for m in model.modules() if m is not model and layers(m)]
    raise TypeError(
        f"layers must be a module type, a tuple of types or a function, not {type(layers).__name__}"
    )


def _policy(mixed_precision: Any) -> Any:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if mixed_precision is None or isinstance(mixed_precision, MixedPrecisionPolicy):
        return mixed_precision or MixedPrecisionPolicy()
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if mixed_precision not in dtypes:
        raise ValueError(
            f"mixed_precision must be 'bf16', 'fp16' or a MixedPrecisionPolicy, not {mixed_precision!r}"
        )
    # parameters computed in the low precision, gradients reduced in fp32: torchtitan's default
    return MixedPrecisionPolicy(param_dtype=dtypes[mixed_precision], reduce_dtype=torch.float32)


def shard(
    model: Any,
    layers: LayerSpec = None,
    *,
    mesh: Any,
    mixed_precision: Any = None,
    cpu_offload: bool = False,
    reshard_after_forward: bool = True,
    quiet: bool = False,
) -> Any:
    """Apply FSDP2's ``fully_shard`` to each layer of ``model`` and to the root; return ``model``.

    ``layers``: a module type, a tuple of types or a function module -> bool (default: the
    entries of every ``nn.ModuleList``). ``mixed_precision``: "bf16", "fp16" or a
    ``MixedPrecisionPolicy``. ``cpu_offload``: keep the shards in pinned CPU memory
    (``CPUOffloadPolicy``; GPU ranks only). A model built on the meta device is materialised on
    this rank's device and initialised with each module's ``reset_parameters()``, so a model
    larger than one device never exists whole anywhere.
    """
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    device_type = mesh.device_type
    if cpu_offload and device_type != "cuda":
        raise ValueError(
            "cpu_offload keeps GPU ranks' shards on the CPU; these ranks already compute on the CPU"
        )
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    options: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": reshard_after_forward,
        "mp_policy": _policy(mixed_precision),
    }
    if cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    blocks = layers_of(model, layers)
    kinds = ", ".join(sorted({type(b).__name__ for b in blocks}))  # before fully_shard renames them
    what = f"{len(blocks)} layers ({kinds}) and the root" if blocks else "the root only (no layers found)"
    for block in blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)
    materialised = any(p.is_meta for p in model.parameters())
    if materialised:
        model.to_empty(
            device="cpu"
            if cpu_offload or device_type == "cpu"
            else torch.device("cuda", torch.cuda.current_device())
        )
        with torch.no_grad(), warnings.catch_warnings():
            # "DTensor random operators may not have complete support on cpu device mesh": each
            # rank draws its shard from its own generator, which is all an initialisation needs
            warnings.filterwarnings("ignore", message="DTensor random operators")
            for module in model.modules():
                if callable(getattr(module, "reset_parameters", None)):
                    module.reset_parameters()
    if not quiet:
        print(
            _summary(model, what, mesh, full, mixed_precision, cpu_offload, materialised),
            flush=True,
        )
    return model


def _summary(
    model: Any,
    what: str,
    mesh: Any,
    full: int,
    mixed_precision: Any,
    cpu_offload: bool,
    materialised: bool,
) -> str:
    from ..analysis.units import format_bytes

    local = sum(_local(p).numel() * _local(p).element_size() for p in model.parameters())
    extras = []
    if mixed_precision is not None:
        extras.append(f"mixed precision {mixed_precision if isinstance(mixed_precision, str) else 'custom'}")
    if cpu_offload:
        extras.append("shards offloaded to the CPU")
    if materialised:
        extras.append("built from the meta device, initialised with reset_parameters()")
    return (
        f"shard: {what} over {mesh.size()} ranks ({mesh.device_type}); parameters "
        f"{format_bytes(full)} in all, {format_bytes(local)} on this rank"
        + ("; " + "; ".join(extras) if extras else "")
    )


def _local(tensor: Any) -> Any:
    """A DTensor's own shard (a plain tensor is all local)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _tensors(value: Any) -> Iterable[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)


def held(namespace: Mapping[str, Any]) -> dict[str, int]:
    """What this rank holds for the models and optimizers bound in its namespace, in bytes:
    its parameter shards, the whole parameters they are cut from, gradients and optimizer
    state (the figures that show sharding pay off, on the CPU as on GPUs)."""
    import torch

    params: dict[int, Any] = {}
    states: dict[int, Any] = {}
    for value in list(namespace.values()):
        if isinstance(value, torch.nn.Module):
            params.update((id(p), p) for p in value.parameters())
        elif isinstance(value, torch.optim.Optimizer):
            states.update((id(t), t) for state in value.state.values() for t in _tensors(state))
    grads = [p.grad for p in params.values() if p.grad is not None]
    return {
        "parameters": sum(_local(p).numel() * _local(p).element_size() for p in params.values()),
        "parameters_full": sum(p.numel() * p.element_size() for p in params.values()),
        "gradients": sum(_local(g).numel() * _local(g).element_size() for g in grads),
        "optimizer": sum(_local(t).numel() * _local(t).element_size() for t in states.values()),
    }
