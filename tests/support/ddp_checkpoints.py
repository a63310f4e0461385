"""What the checkpoint tests share: a small FSDP model trained on real gloo ranks in a kernel,
and how a cell's outcome is read (one line, never a traceback through this package or torch).
Its fixture ``kernel`` (the shared ddp kernel, its ranks stopped after each test) makes it a
pytest plugin, listed in tests/conftest.py."""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.ddp_kernel import Cell, Kernel, no_ranks_left

# A small transformer whose blocks sit in an nn.ModuleList (what shard() splits by default);
# no dropout, so the sharded and the plain run see the same numbers.
MODEL = textwrap.dedent("""\
    import torch.nn as nn

    class Tiny(nn.Module):
        def __init__(self, width=32, blocks=3):
            super().__init__()
            self.embed = nn.Linear(8, width)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(width, 4, 64, dropout=0.0, batch_first=True) for _ in range(blocks)
            )
            self.head = nn.Linear(width, 1)

        def forward(self, x):
            x = self.embed(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x).mean(dim=(1, 2))  # one output per sample
    """)
GLOBAL_BATCH = 6  # splits evenly over 1, 2 and 3 ranks, so the mean of the ranks' losses is the loss
STEP = textwrap.dedent("""\
    def step(model, opt, n):
        g = torch.Generator().manual_seed(100 + n)
        batch = torch.randn({batch}, 5, 8, generator=g)
        part = batch.chunk(WORLD_SIZE)[RANK] if 'WORLD_SIZE' in globals() else batch
        loss = ((model(part) - 1.0) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()
    """).format(batch=GLOBAL_BATCH)


def sharded_training(steps: int) -> str:
    return (
        "%%ddp --return losses\n"
        + MODEL
        + STEP
        + "torch.manual_seed(0)\nmodel = shard(Tiny())\n"
        + "opt = torch.optim.AdamW(model.parameters(), lr=1e-2)\n"
        + f"losses = [step(model, opt, n) for n in range({steps})]\n"
    )


@pytest.fixture()
def checkpoint_kernel(ddp_kernel: Kernel) -> Iterator[Kernel]:
    """The shared DDP kernel, its ranks stopped after the test (the checkpoint modules call it
    ``kernel``)."""
    yield ddp_kernel
    ddp_kernel.run("%ddp_stop")
    assert no_ranks_left(ddp_kernel.pid)


def start(kernel: Kernel, n: int) -> None:
    cell = kernel.run(f"%ddp_start -n {n} --fsdp")
    assert cell.error is None, cell.traceback
    assert f"{n} ranks ready (gloo on cpu)" in cell.stdout and "shard(model)" in cell.stdout


def ok(kernel: Kernel, code: str) -> Cell:
    cell = kernel.run(code)
    assert cell.error is None, cell.traceback + cell.stderr
    return cell


def error_of(kernel: Kernel, code: str) -> str:
    """What a failing cell showed: a UsageError's line (IPython prints it on stderr, no traceback)
    or the ranks' DDPError; never a traceback through this package or torch."""
    cell = kernel.run(code)
    said = cell.traceback if cell.error is not None else cell.stderr
    assert cell.error is not None or said.startswith("UsageError: "), f"{code!r} did not fail: {cell.stdout}"
    assert "Traceback (most recent call last)" not in said and 'File "' not in said, said
    return said.strip()


def saved(kernel: Kernel, folder: Path, steps: int = 1) -> str:
    """Train on 2 fresh ranks and save model and optimizer to ``folder``; what %ddp_save said."""
    start(kernel, 2)
    ok(kernel, sharded_training(steps))
    return ok(kernel, f"%ddp_save {folder} --model model --optimizer opt").stdout


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
