"""torch's memory trackers' categories as ``%gpu_plan``'s columns.

``MemTracker`` and ``FSDPMemTracker`` (``torch.distributed._tools``) name what each byte at the
peak is; the plan adds them up into parameters, gradients, optimizer state, activations,
temporaries and inputs. The optimizer's category also holds the temporaries of its step (the
foreach implementation makes a few parameter-sized ones): they go to temporaries, so that the
optimizer column is the state alone.
"""

from __future__ import annotations

from collections.abc import Mapping

COLUMNS = ("parameters", "gradients", "optimizer", "activations", "temporaries", "inputs")
# The categories' names as torch 2.11 to 2.13 spell them (tests/test_gpu_plan.py pins them).
CATEGORY = {
    "Parameter": "parameters",
    "Buffer": "parameters",
    "Sharded Param": "parameters",
    "Unsharded Param": "parameters",
    "Gradient": "gradients",
    "Sharded Grad": "gradients",
    "Unsharded Grad": "gradients",
    "Activation": "activations",
    "Temp": "temporaries",
    "All Gather": "temporaries",
    "Reduce Scatter": "temporaries",
    "Optstate": "optimizer",
    "OptState": "optimizer",
    "Other": "inputs",
    "Inputs": "inputs",
}
TOTAL = "Total"
# What FSDP's CPU offload keeps in host memory instead: the shards, their gradients, the
# optimizer (which then steps on the CPU).
OFFLOADED = ("Sharded Param", "Sharded Grad", "OptState")


def columns(peak: Mapping[str, int], state_bytes: int) -> dict[str, int]:
    """The peak snapshot ``peak`` (category -> bytes, and "Total") as the plan's columns;
    ``state_bytes``: the optimizer's state measured on its own. Unknown categories count as
    temporaries, so that the columns always add up to the peak."""
    out = dict.fromkeys(COLUMNS, 0)
    for name, value in peak.items():
        if name != TOTAL:
            out[CATEGORY.get(name, "temporaries")] += value
    state = min(out["optimizer"], state_bytes)
    out["temporaries"] += out["optimizer"] - state
    out["optimizer"] = state
    return out


def offloaded(peak: Mapping[str, int]) -> dict[str, int]:
    """An FSDP peak snapshot without what CPU offload keeps on the host: the estimate for a
    fake device that has no host apart from it (the stand-in for CUDA is the CPU itself)."""
    return {name: (0 if name in OFFLOADED else value) for name, value in peak.items() if name != TOTAL}
