"""Real training libraries inside ``%%ddp_launch`` ranks (gloo on the CPU here): the cells of
examples/ddp_transformers_trainer.ipy (Hugging Face's ``Trainer``) and
examples/ddp_lightning_trainer.ipy (Lightning's ``Trainer(strategy="ddp")``), run as they are
written. The trainers find the ranks' process group and world size with no setup, split the data
between the ranks, train in step (every rank ends with the same weights), and their output reaches
the cell marked by rank. Tiny models built from configs, synthetic data, nothing downloaded."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from support.ddp_kernel import Cell, Kernel, no_ranks_left
from support.paths import ROOT

TRANSFORMERS = (ROOT / "examples" / "ddp_transformers_trainer.ipy").read_text()
LIGHTNING = (ROOT / "examples" / "ddp_lightning_trainer.ipy").read_text()
# Each rank's share of the examples' 256 samples in batches of 8, when the data is split in two.
BATCHES = 256 // 8 // 2
# The weights every rank returned, compared in the kernel: the same in all of them, or not.
SAME_WEIGHTS = "print(all(torch.equal(w[k], _ddp[0][k]) for w in _ddp.values() for k in w), sorted(_ddp))"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """A kernel, in a folder of its own (the trainers write there), whose ranks could not
    download a model if they tried."""
    kernel = Kernel(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    kernel.run(f"%cd {tmp_path_factory.mktemp('trainers')}\nimport torch")
    yield kernel
    kernel.close()


def launch(kernel: Kernel, cell: str) -> Cell:
    """Run the cell; check that it succeeded, that its output came as that cell's stream
    messages, and that its ranks are gone."""
    ran = kernel.run(cell, timeout=180)
    assert ran.error is None, ran.traceback
    streams = [m for m in kernel.messages(ran.msg_id) if m["msg_type"] == "stream"]
    assert streams and all(m["parent_header"]["msg_id"] == ran.msg_id for m in streams)
    assert no_ranks_left(kernel.pid)
    return ran


def assert_trained_in_step(kernel: Kernel, stdout: str) -> None:
    """Both ranks, each told it is one of 2 and given half the batches, ended with the same weights
    (without DDP's all-reduce of the gradients they would part with their data)."""
    for rank in (0, 1):
        assert f"[rank {rank}] rank {rank} of 2: {BATCHES} batches per epoch" in stdout.splitlines(), stdout
    assert kernel.run(SAME_WEIGHTS).stdout == "True [0, 1]\n"


def test_transformers_trainer_trains_in_the_ranks_process_group(kernel: Kernel) -> None:
    stdout = launch(kernel, TRANSFORMERS).stdout
    assert_trained_in_step(kernel, stdout)
    # the Trainer logs on its main process only: it knows which rank it is in
    logged = [line for line in stdout.splitlines() if "'loss'" in line]
    assert len(logged) == 2 and all(line.startswith("[rank 0] {'loss'") for line in logged), stdout


def test_lightning_trainer_trains_in_the_ranks_process_group(kernel: Kernel) -> None:
    cell = launch(kernel, LIGHTNING)
    assert_trained_in_step(kernel, cell.stdout)
    # Lightning's own messages come from rank 0 only
    stopped = re.findall(r"^\[rank (\d)\] `Trainer.fit` stopped: `max_steps=10` reached.$", cell.stderr, re.M)
    assert stopped == ["0"], cell.stderr


def test_a_lightning_trainer_with_other_devices_than_ranks_says_so(kernel: Kernel) -> None:
    assert "devices=2, " in LIGHTNING
    cell = kernel.run(LIGHTNING.replace("devices=2, ", ""), timeout=180)  # Lightning's default: 1 on the CPU
    assert cell.error is not None
    assert (
        "ValueError: You set `devices=1` and `num_nodes=1` in Lightning, but the product (1 * 1) does "
        "not match the world size (2)."
    ) in cell.traceback, cell.traceback
    assert no_ranks_left(kernel.pid)
