"""The fake world a plan runs in: one ``FakeTensorMode``, the device its tensors claim, and the
user's model and batch brought into it without copying a byte of their data.

Which device: fake ``cuda`` tensors only where this kernel has already initialised CUDA. torch
makes a real CUDA tensor the first time it fakes one (``init_gpu_context``: a ~500 MiB context in
a kernel that had none), and on a CPU-only build the backward pass of a fake ``cuda`` model
aborts the process. Elsewhere the step runs on fake ``cpu`` tensors standing in for CUDA: the
user's ``.cuda()``, ``device="cuda"`` and ``.to("cuda")`` are redirected to it, optimizers run
their CUDA default (``foreach``), autocast runs the CPU's lists.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_unflatten

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class PlanError(Exception):
    """Something of the user's (model, input, loss) that cannot be planned, as one line."""


def _is_cuda(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":")[0] == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


class _CudaToStandIn(TorchFunctionMode):
    """Sends what the user's code puts on CUDA to the stand-in device, so that no real CUDA
    call (and no context) comes of it."""

    def __init__(self, stand_in: str) -> None:
        super().__init__()
        self.stand_in = stand_in

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0].to(self.stand_in)
        if func is torch.Tensor.pin_memory:
            return args[0]
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = self.stand_in
        if func is torch.Tensor.to:
            args = tuple(self.stand_in if _is_cuda(a) else a for a in args)
        return func(*args, **kwargs)


@dataclass
class FakeWorld:
    """One fake mode for a whole plan: fake tensors of one mode cannot meet another's."""

    device: str  # "cuda" or the stand-in "cpu"
    mode: FakeTensorMode

    @classmethod
    def for_this_kernel(cls) -> FakeWorld:
        device = "cuda" if torch.cuda.is_initialized() else "cpu"
        return cls(device, FakeTensorMode(allow_non_fake_inputs=False))

    @property
    def stand_in(self) -> bool:
        return self.device != "cuda"

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            # deep-copying a fake module (nn.TransformerEncoder clones its layer so) reads data
            # pointers, which fake tensors lack; torch warns, and nothing is wrong
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            stack.enter_context(self.mode)
            stack.enter_context(torch.device(self.device))
            if self.stand_in:
                stack.enter_context(_CudaToStandIn(self.device))
            yield

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype, requires_grad: bool = False) -> torch.Tensor:
        """A fake tensor of this world (call inside ``active``)."""
        return torch.empty(shape, dtype=dtype, device=self.device, requires_grad=requires_grad)


def into_world(model: nn.Module, world: FakeWorld, dtype: torch.dtype | None) -> nn.Module:
    """A copy of ``model`` whose parameters, buffers and tensor attributes are new fake tensors of
    ``world`` (same shapes; floating ones in ``dtype`` when given). Real or meta, or fake from
    another fake mode (``copy.deepcopy`` of a fake module makes one: ``nn.TransformerEncoder``
    clones its layer so), nothing of the original is read or copied but its shapes."""
    memo: dict[int, Any] = {}
    for module in model.modules():
        tensors = [*module._parameters.values(), *module._buffers.values()]
        tensors += [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
        for t in tensors:
            if t is None or id(t) in memo:
                continue
            kind = dtype if dtype is not None and t.is_floating_point() else t.dtype
            new = world.empty(tuple(t.shape), kind)
            memo[id(t)] = (
                nn.Parameter(new, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else new
            )
    try:
        return copy.deepcopy(model, memo)
    except Exception as exc:
        raise PlanError(
            f"cannot copy the model ({type(exc).__name__}: {exc}); pass a function that builds it instead"
        ) from None


def build_model(source: Any, world: FakeWorld, dtype: torch.dtype | None) -> nn.Module:
    """A fresh fake model: ``source`` is a module, or a function (or class) that builds one."""
    with world.active():
        built = source if isinstance(source, nn.Module) else source()
        if not isinstance(built, nn.Module):
            raise PlanError(f"MODEL built a {type(built).__name__}, not a torch.nn.Module")
        return into_world(built, world, dtype)


@dataclass
class Batch:
    """The shapes of the user's batch (and target): each step gets fresh fake tensors of them,
    with the batch dimension set to the size asked for."""

    leaves: list[Any]  # (shape, dtype) for a tensor, the value itself otherwise
    spec: Any
    dim: int
    size: int  # the batch the user's expression made

    @classmethod
    def of(cls, value: Any, dim: int, what: str) -> Batch:
        flat, spec = tree_flatten(value)
        leaves = [(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else v for v in flat]
        shapes = [leaf[0] for leaf in leaves if isinstance(leaf, tuple)]
        if not shapes:
            raise PlanError(f"{what} made no tensor")
        first = shapes[0]
        if not -len(first) <= dim < len(first):
            raise PlanError(f"--batch-dim {dim}: {what}'s first tensor has {len(first)} dimensions")
        return cls(leaves, spec, dim % len(first), first[dim])

    def make(self, world: FakeWorld, size: int | None = None) -> Any:
        """The batch as fake tensors of ``world`` (call inside ``active``)."""
        size = self.size if size is None else size
        out = []
        for leaf in self.leaves:
            if isinstance(leaf, tuple):
                shape, dtype = list(leaf[0]), leaf[1]
                if len(shape) > self.dim and shape[self.dim] == self.size:
                    shape[self.dim] = size
                out.append(world.empty(tuple(shape), dtype))
            else:
                out.append(leaf)
        return tree_unflatten(out, self.spec)


def evaluate(expression: str, namespace: dict[str, Any], world: FakeWorld, what: str) -> Any:
    """``expression`` evaluated in the user's namespace inside the fake world."""
    try:
        with world.active():
            return eval(expression, namespace)  # noqa: S307 -- the user's own expression, as %timeit does
    except Exception as exc:
        raise PlanError(f"{what} {expression!r} failed: {type(exc).__name__}: {exc}") from None


def model_call(model: nn.Module, batch: Any) -> Any:
    """A tuple or list is the positional arguments, a mapping the keyword arguments."""
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    if isinstance(batch, dict):
        return model(**batch)
    return model(batch)


def first_tensor(value: Any, what: str) -> torch.Tensor:
    flat, _ = tree_flatten(value)
    tensor = next((v for v in flat if isinstance(v, torch.Tensor)), None)
    if tensor is None:
        raise PlanError(f"{what} holds no tensor")
    return tensor
