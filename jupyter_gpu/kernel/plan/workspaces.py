"""cuDNN's convolution workspaces, which fake tensors never allocate, as fake scratch tensors.

On the GPU each convolution asks PyTorch's allocator for a workspace while it runs, and in a CNN
that is a tenth of the step's peak: a plan that leaves it out is short by that much. Measured on
an H200 (cuDNN 9.19, ``benchmarks/conv_workspace.py``): with PyTorch's defaults a convolution
with a kernel wider than 1x1 takes about the size of the activations the pass reads and writes
(forward: input and output; the input's gradient: the output's gradient and the input's; the
weight's gradient: the input and the output's gradient), as a layout copy of each; a 1x1
convolution runs as a matrix product and takes next to none. The estimate is that upper figure,
held for the op's duration so that the tracker's peak sees it beside the op's results; other
GPUs and cuDNN versions choose other algorithms.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _bytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def workspace_bytes(func: Any, args: tuple[Any, ...], result: Any) -> int:
    """The estimated workspace of one convolution call (0 for anything else)."""
    if func not in (aten.convolution.default, aten.convolution_backward.default):
        return 0
    if func is aten.convolution.default:
        x, weight = args[0], args[1]
        return 0 if math.prod(weight.shape[2:]) <= 1 else _bytes(x) + _bytes(result)
    grad, x, weight, mask = args[0], args[1], args[2], args[10]
    if math.prod(weight.shape[2:]) <= 1 or not (mask[0] or mask[1]):
        return 0
    # either gradient's pass reads and writes the output's gradient and an input-sized tensor;
    # they run one after the other, each with its own workspace
    return _bytes(grad) + _bytes(x)


class ConvWorkspaces(TorchDispatchMode):
    """Holds a fake scratch tensor of each convolution's estimated workspace beside its results.

    Entered inside the memory tracker, so the scratch counts in the tracker's peak (as a
    temporary of the module running) together with the op's results, and is freed at once."""

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled
        self.convolutions = 0  # convolutions seen that would take a workspace

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        size = workspace_bytes(func, args, result)
        if size:
            self.convolutions += 1
        if size and self.enabled:
            scratch = torch.empty(size, dtype=torch.uint8, device=args[0].device)
            del scratch
        return result
