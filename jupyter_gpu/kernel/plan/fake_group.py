"""A fake process group for planning FSDP over N GPUs in one process: torch's ``FakeStore`` and
``fake`` backend (``torch.testing._internal.distributed.fake_pg``), whose collectives do nothing
and claim ``world_size`` ranks.

It has to be the default group (``fully_shard`` and ``DeviceMesh`` go through it), so it is made
only where the kernel has none, and destroyed after: a user's own process group is never
replaced or touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class NoFakeGroup(Exception):
    """Why sharded strategies cannot be planned in this kernel, as one line."""


@contextlib.contextmanager
def fake_mesh(world_size: int, device: str) -> Iterator[Any]:
    """A 1-D device mesh of ``world_size`` fake ranks (this process is rank 0)."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise NoFakeGroup("this torch build has no torch.distributed")
    if dist.is_initialized():
        raise NoFakeGroup(
            "this kernel has a process group of its own, which planning FSDP would have to replace: "
            "plan it in a kernel without one"
        )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    current = torch.cuda.current_device() if device == "cuda" else None  # the mesh may set device 0
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield init_device_mesh(device, (world_size,))
    finally:
        dist.destroy_process_group()
        if current is not None:
            torch.cuda.set_device(current)
