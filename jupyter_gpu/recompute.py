"""Activation checkpointing of a model's blocks: what ``%gpu_plan``'s ``checkpoint`` and ``sac``
rows measure, as one call you can make on the real model (in the kernel or in ``%%ddp_launch``
ranks alike; torch is imported when it is called).

A block is an entry of an ``nn.ModuleList`` (a transformer's layers), as ``shard(model)``
shards them. Full checkpointing keeps only each block's input and recomputes the rest in the
backward pass; the selective policy (``selective=True``, torchtitan's op-level policy) also keeps
the outputs of matrix multiplications, convolutions and attention, and recomputes only the cheap
ops between them: less memory saved, little compute paid.
"""

from __future__ import annotations

from functools import partial
from typing import Any


def _selective_context() -> Any:
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    keep = {getattr(aten, name).default for name in names if hasattr(aten, name)}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def checkpoint_blocks(model: Any, *, selective: bool = False) -> int:
    """Wrap every entry of every ``nn.ModuleList`` of ``model`` in torch's non-reentrant
    ``checkpoint_wrapper`` (in place); return how many blocks were wrapped (0: none found).

    ``selective``: keep matmul, convolution and attention outputs (recompute the rest)."""
    import torch.nn as nn
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper,
        checkpoint_wrapper,
    )

    wrap = partial(checkpoint_wrapper, context_fn=_selective_context) if selective else checkpoint_wrapper
    wrapped = 0
    for parent in list(model.modules()):
        if not isinstance(parent, nn.ModuleList):
            continue
        for index, block in enumerate(parent):
            if not isinstance(block, CheckpointWrapper):
                parent[index] = wrap(block)
                wrapped += 1
    return wrapped
