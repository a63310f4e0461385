"""``%ddp_load_local``: a checkpoint of the ranks, whole, in the kernel (to evaluate, export or
keep training on one device), refused before it could exhaust the memory it would land in:
the kernel dying of out-of-memory would lose everything else the notebook holds.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

from IPython.core.error import UsageError

from ...analysis.units import format_bytes
from ...ddp.checkpoint_files import resolve, trusted
from ...ddp.errors import BadInput
from ...doctor import no_gpu_reason

_DEVICE = re.compile(r"cpu|cuda(:\d{1,2})?")


def free_bytes(device: str) -> int:
    """Memory that new tensors on ``device`` can take; CUDA is asked only when the user named it."""
    if device == "cpu":
        import psutil

        return int(psutil.virtual_memory().available)
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def _meta_bytes(model: Any) -> int:
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors if t.is_meta)


def load_into_kernel(
    user_ns: MutableMapping[str, Any], folder: str, model_name: str | None, device: str, force: bool
) -> dict[str, Any] | None:
    """Fill the kernel's model ``model_name`` from the checkpoint, or return its whole state dict."""
    if not _DEVICE.fullmatch(device):
        raise UsageError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if device != "cpu":  # asked before the checkpoint is read: no GPU is said at once, with why
        reason = no_gpu_reason()
        if reason is not None:
            raise UsageError(f"--device {device}: {reason} (%gpu_doctor says how to fix it)")
    path = trusted(resolve(folder))
    import torch

    from ...ddp.checkpoint import Problem, load_local, one_line, stored_model_bytes

    model = None
    if model_name is not None:
        model = user_ns.get(model_name)
        if not isinstance(model, torch.nn.Module):
            what = "is not defined" if model_name not in user_ns else f"is a {type(model).__name__}"
            raise UsageError(f"--model {model_name}: {what}, not a torch.nn.Module in this kernel")
    try:
        needed = stored_model_bytes(path) if model is None else _meta_bytes(model)
        free = free_bytes(device) if needed else 0
        if needed > free and not force:
            raise UsageError(
                f"{path} needs {format_bytes(needed)} on {device}, which has {format_bytes(free)} "
                "free: loading it could kill this kernel (out of memory) and lose everything in it. "
                "Free memory, load onto another --device, or add --force"
            )
        state = load_local(path, model, device)
    except (UsageError, BadInput):
        raise
    except Problem as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # a corrupt checkpoint of the user's own, a device that is not there
        raise UsageError(f"cannot load {path}: {one_line(exc)}") from None
    size = sum(t.numel() * t.element_size() for t in state.values())
    into = f"into {model_name}" if model is not None else f"on {device}"
    print(f"Loaded {len(state)} tensors ({format_bytes(size)}) from {path} {into}")
    return None if model is not None else state
