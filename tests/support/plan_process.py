"""%gpu_plan run in a process of its own, as it runs in a kernel: the test asks, a spawned
Python (no state of the test process inherited) builds the models, runs the magic in an IPython
shell there and sends back what a user would see.

Why not in the test process: planning puts torch's fake tensors, memory trackers, DTensor and
fake process groups into the process that runs it, for good; a suite that ran them in pytest's own
process crashed at its very end (heap corruption found at exit), never in a test. A kernel is
where they belong, and a fresh process per test module keeps the suite's process clean.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

PLAN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Planned:
    """What the magic gave: its rows, its text and HTML, and what it left in the process."""

    rows: list[dict[str, Any]]
    text: str
    html: str
    cuda_initialized: bool
    grown_bytes: int  # resident memory the plan added to the process
    process_group: str | None  # the default group's backend afterwards, None when there is none
    kept_group: bool  # the default group afterwards is the one there before (or both none)


def _model(kind: str, sizes: dict[str, Any]) -> Any:
    import torch

    from support.plan_models import GPT, cnn

    if kind == "gpt":
        with torch.device("meta"):
            return GPT(**sizes)
    if kind == "cnn":
        with torch.device("meta"):
            return cnn(**sizes)
    if kind == "encoder":
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    raise ValueError(f"no model kind {kind!r}")


def _plan(line: str, models: dict[str, tuple[str, dict[str, Any]]], group_store: str | None) -> Planned:
    """In the planning process: the magic on ``models`` (name: kind, sizes), with a gloo process
    group of the user's own around it when ``group_store`` names a FileStore."""
    import psutil
    import torch
    import torch.distributed as dist

    from jupyter_gpu.kernel.plan import magic
    from support.ipython_shell import shared_shell

    shell = shared_shell()
    undo = magic.register(shell)
    if group_store is not None:
        dist.init_process_group("gloo", store=dist.FileStore(group_store, 1), rank=0, world_size=1)
    group = dist.group.WORLD
    try:
        shell.user_ns.update(torch=torch, **{name: _model(*spec) for name, spec in models.items()})
        before = psutil.Process().memory_info().rss
        result = shell.run_line_magic("gpu_plan", line)
        grown = psutil.Process().memory_info().rss - before
        return Planned(
            rows=result.rows,
            text=repr(result),
            html=result._repr_mimebundle_()["text/html"],
            cuda_initialized=torch.cuda.is_initialized(),
            grown_bytes=grown,
            process_group=dist.get_backend() if dist.is_initialized() else None,
            kept_group=dist.group.WORLD is group,
        )
    finally:
        if group_store is not None and dist.is_initialized():
            dist.destroy_process_group()
        undo()


class PlanProcess:
    """One spawned planning process for a test module."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        )

    def plan(
        self, line: str, group_store: str | None = None, **models: tuple[str, dict[str, Any]]
    ) -> Planned:
        """``%gpu_plan line`` there, with ``models`` as ``name=("gpt", sizes)`` or ``("encoder", {})``."""
        return self._pool.submit(_plan, line, models, group_store).result(timeout=PLAN_TIMEOUT_S)

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


def plan_process() -> Iterator[PlanProcess]:
    """A module fixture's body."""
    process = PlanProcess()
    yield process
    process.close()
