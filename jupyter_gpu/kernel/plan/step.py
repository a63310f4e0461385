"""One training step of one strategy, measured on fake tensors by torch's own trackers.

The step is what a training loop does: forward (under autocast for ``amp``), the loss, backward,
``optimizer.step()``, ``zero_grad()``. It runs twice: the first creates the optimizer's state,
the second, tracked by ``MemTracker`` (``FSDPMemTracker`` for FSDP), is what every later step
costs. ``RuntimeEstimator``'s roofline model times a third where this kernel has a GPU's
specifications (CUDA initialised).

Relies on ``torch.distributed._tools`` (``MemTracker``, ``FSDPMemTracker``, ``RuntimeEstimator``),
private but present and alike in torch 2.11 and 2.13; ``tests/test_gpu_plan.py`` pins what is
used of them.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...analysis.plan import AMP_DTYPE
from ...analysis.plan_figures import columns, offloaded
from ...recompute import checkpoint_blocks
from .fake_world import DTYPES, Batch, FakeWorld, PlanError, first_tensor, model_call
from .workspaces import ConvWorkspaces

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, foreach=True),
    "adam": lambda params: torch.optim.Adam(params, foreach=True),
    "adamw": lambda params: torch.optim.AdamW(params, foreach=True),
}
CUDA_BLOCK = 512  # the CUDA caching allocator rounds every block up to this (MemTracker does too)


@dataclass(frozen=True)
class StepSpec:
    """What the user asked to train, independent of the strategy."""

    source: Any  # an nn.Module, or a function that builds one
    batch: Batch
    target: Batch | None
    loss: str | None  # None (the output's mean), "mse", "cross_entropy" or an expression
    namespace: dict[str, Any]
    optimizer: str
    dtype: torch.dtype | None


@dataclass(frozen=True)
class Measured:
    figures: dict[str, int]  # the plan's columns at the peak
    peak_bytes: int
    gradients_bytes: int  # every gradient together (DDP's buckets are as big)
    step_seconds: float | None
    time_error: str | None = None  # why RuntimeEstimator gave no time
    convolutions: int = 0  # convolutions that take a cuDNN workspace (held in the peak if asked)


def _loss(spec: StepSpec, out: Any, target: Any) -> torch.Tensor:
    F = torch.nn.functional
    if spec.loss is None:
        return first_tensor(out, "the model's output").float().mean()
    prediction = first_tensor(out, "the model's output")
    if spec.loss == "mse":
        return F.mse_loss(prediction, prediction.new_empty(prediction.shape) if target is None else target)
    if spec.loss == "cross_entropy":
        logits = prediction.flatten(0, -2) if prediction.dim() > 2 else prediction
        if target is None:
            target = torch.empty(logits.shape[:1], dtype=torch.long, device=logits.device)
        return F.cross_entropy(logits, first_tensor(target, "--target").flatten())
    names = {**spec.namespace, "out": out, "target": target, "F": F, "torch": torch}
    try:
        value = eval(spec.loss, names)  # noqa: S307 -- the user's own expression
    except Exception as exc:
        raise PlanError(f"--loss {spec.loss!r} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise PlanError(f"--loss {spec.loss!r} must give a one-element tensor")
    return value


def _amp(features: frozenset[str]) -> torch.dtype | None:
    name = next((AMP_DTYPE[f] for f in ("amp", "amp-fp16") if f in features), None)
    return None if name is None else DTYPES[name]


def _state_bytes(optimizer: torch.optim.Optimizer, device: str) -> int:
    """The optimizer's state on the compute device: not its scalar step counters, which CUDA
    training keeps on the CPU."""
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                local = value.to_local() if hasattr(value, "to_local") else value
                size = local.numel() * local.element_size()
                total += math.ceil(size / CUDA_BLOCK) * CUDA_BLOCK if device == "cuda" else size
    return total


def _prepare(model: nn.Module, features: frozenset[str], mesh: Any, world: FakeWorld) -> None:
    """The strategy's changes to the model, in the order torchtitan applies them."""
    if features & {"checkpoint", "sac"} and not checkpoint_blocks(model, selective="sac" in features):
        raise PlanError("no blocks to checkpoint: the model has no nn.ModuleList of layers")
    if "fsdp" in features:
        from ...ddp.fsdp import shard

        amp = next((AMP_DTYPE[f] for f in ("amp", "amp-fp16") if f in features), None)
        offload = "offload" in features and world.device == "cuda"
        shard(model, mesh=mesh, mixed_precision=amp, cpu_offload=offload, quiet=True)


def measure(
    spec: StepSpec,
    world: FakeWorld,
    features: frozenset[str],
    batch_size: int,
    mesh: Any = None,
    estimate_time: bool = False,
    workspaces: bool = True,
) -> Measured:
    """One strategy at one batch size: the steady-state step's peak and what makes it."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    from .fake_world import build_model

    model = build_model(spec.source, world, spec.dtype)
    fsdp = "fsdp" in features
    autocast = None if fsdp else _amp(features)
    with world.active():
        _prepare(model, features, mesh, world)
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise PlanError("the model has no parameter that requires a gradient")
        optimizer = OPTIMIZERS[spec.optimizer](params)
        batch = spec.batch.make(world, batch_size)
        target = None if spec.target is None else spec.target.make(world, batch_size)

        def step() -> None:
            scope = torch.autocast(world.device, autocast) if autocast else contextlib.nullcontext()
            with scope:
                out = model_call(model, batch)
                loss = _loss(spec, out, target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()
        tracker: Any
        if fsdp:
            tracker = FSDPMemTracker(model, optimizer)
            tracker.track_inputs((batch, target))
        else:
            tracker = MemTracker()
            tracker.track_external(model, optimizer, *_tensors(batch), *_tensors(target))
        scratch = ConvWorkspaces(enabled=workspaces)
        with tracker, scratch:
            step()
        snapshot = _device_snapshot(tracker.get_tracker_snapshot("peak"), world.device)
        if "offload" in features and world.device != "cuda":
            snapshot = offloaded(snapshot)
        figures = columns(snapshot, _state_bytes(optimizer, world.device))
        seconds, time_error = _estimate(step) if estimate_time and not fsdp else (None, None)
    gradients = sum(p.numel() * p.element_size() for p in params)
    return Measured(figures, sum(figures.values()), gradients, seconds, time_error, scratch.convolutions)


def _tensors(value: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _device_snapshot(snapshot: dict[Any, dict[Any, int]], device: str) -> dict[str, int]:
    """The compute device's part of a tracker snapshot, categories by name."""
    for key, values in snapshot.items():
        if torch.device(key).type == device:
            return {str(getattr(name, "value", name)): value for name, value in values.items()}
    return {}


class _Quiet(io.StringIO):
    """Swallows the estimator's printout. It has an encoding because triton reads the GPU's
    peak figures from nvidia-smi and decodes them with ``sys.stdout.encoding`` (a plain
    StringIO's None made torch 2.11's estimator fail on the H200)."""

    encoding = "utf-8"


def _estimate(step: Callable[[], None]) -> tuple[float | None, str | None]:
    """Seconds for one step by torch's roofline model (needs CUDA initialised: it reads the
    GPU's peak FLOP/s and memory bandwidth), or None and why the model failed on the step."""
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator

    estimator = RuntimeEstimator()
    try:
        with contextlib.redirect_stdout(_Quiet()), estimator("operator-level-cost-model"):
            step()  # it prints its total on exit
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        return None, f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return estimator.total_runtime / 1e3, None
