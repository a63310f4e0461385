"""What %gpu_warmup warms for a notebook: its source text -> layer families, dtypes, optimizers
(a pure function, no GPU), and the line that says what it chose and why; the notebook's code
cells as the kernel reads them, within bounds."""

from __future__ import annotations

import json
import os

import pytest

from jupyter_gpu.kernel import warmup_sources
from jupyter_gpu.warmup_choice import Choice, choose

CNN = """\
import torch
from torch import nn
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Flatten(), nn.Linear(32 * 32 * 32, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
"""
GPT = """\
%%amp
model = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, batch_first=True), 6)
emb = nn.Embedding(50257, 512)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
"""


def test_a_cnn_notebook_warms_conv_norms_linear_and_sgd_in_fp32():
    choice = choose({"finetune.ipynb": CNN, "this kernel's cells": ""})
    assert choice.families == {"conv", "norms", "linear"}
    assert (choice.dtypes, choice.optimizers, choice.modes) == (("fp32",), ("SGD",), ("foreach",))
    assert choice.optimizer_import and not choice.grad_scaler
    assert choice.linears == ((32768, 10),)  # 32 * 32 * 32, as written
    assert choice.describe() == (
        "warming conv, norms, linear (32768x10), SGD in fp32: named in finetune.ipynb; --all for everything"
    )


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        ("nn.Linear(784, 512), nn.Linear(512, 10, bias=False)", ((512, 10), (784, 512))),
        ("nn.Linear(4096 + 4096, 2)", ((8192, 2),)),
        ("nn.Linear(hidden, 10)", ()),  # a name: the common widths instead
        ("nn.Linear(9**9**9, 3)", ()),  # never evaluated: no size
        ("nn.Linear(2097152, 3)", ()),  # beyond any first notebook's layer: not warmed
        ("nn.Linear(1048576, 8192)", ()),  # a 32 GB layer a comment could ask for: not warmed
        ("nn.Linear(" + "9" * 5000 + ", 3)", ()),  # beyond int()'s digit limit: no size, no error
        ("nn.Linear(1," + " " * 10_000 + "x", ()),  # minutes of backtracking with an unbounded pattern
    ],
)
def test_linear_sizes_written_as_numbers_are_warmed_as_written(text, sizes):
    assert choose({"a.ipynb": text}).linears == sizes


def test_a_transformer_under_amp_warms_bf16_and_the_fused_optimizer_as_named():
    choice = choose({"gpt.ipynb": GPT})
    assert choice.families == {"transformer", "embedding"}
    assert choice.dtypes == ("fp32", "bf16")  # %%amp's default, fp16 on GPUs without bf16
    assert (choice.optimizers, choice.modes) == (("AdamW",), ("fused",))
    assert choice.describe().startswith("warming embedding, transformer, AdamW (fused) in fp32 and bf16:")


@pytest.mark.parametrize(
    ("text", "dtypes"),
    [
        ("with torch.autocast('cuda'):\n    loss = f(x)", ("fp32", "fp16")),  # torch's default dtype
        ("with torch.autocast('cuda', dtype=torch.bfloat16):\n    pass", ("fp32", "bf16")),
        ("%amp on --dtype fp16", ("fp32", "fp16")),
        ("%amp off", ("fp32",)),
        ("scaler = torch.amp.GradScaler()", ("fp32", "fp16")),
        ("model = model.half()", ("fp32", "fp16")),
        ("x = torch.ones(3, dtype=torch.float32)", ("fp32",)),
    ],
)
def test_half_precision_only_where_the_notebook_uses_it(text, dtypes):
    assert choose({"nb.ipynb": text}).dtypes == dtypes


def test_nothing_named_warms_the_basics_and_says_where_it_looked():
    choice = choose(
        {"empty.ipynb": "x = 1\nprint('half of it')", "this kernel's cells": "%load_ext jupyter_gpu"}
    )
    assert choice.basics_only and not choice.optimizer_import
    assert choice.describe() == (
        "warming the basics (context, elementwise, fp32 matmul): no layer, optimizer or half "
        "precision named in empty.ipynb and this kernel's cells; --all for everything"
    )
    assert "no notebook found and no cell run yet" in choose({}).describe()


def test_another_optimizer_warms_only_the_optimizer_import():
    choice = choose(
        {
            "nb.ipynb": "opt = torch.optim.RMSprop(model.parameters())\nsched = optim.lr_scheduler.StepLR(opt, 1)"
        }
    )
    assert choice.optimizer_import and choice.optimizers == () and not choice.families
    assert "the optimizer import" in choice.describe()


def test_sources_are_combined_and_each_named_where_it_counted():
    choice = choose(
        {"a.ipynb": "nn.Linear(4, 4)", "this kernel's cells": "x = 1", "this kernel's objects": "Embedding"}
    )
    assert choice.families == {"linear", "embedding"}
    assert choice.describe().endswith("named in a.ipynb and this kernel's objects; --all for everything")


def test_all_is_everything():
    choice = Choice.all()
    assert choice.everything and set(choice.families) >= {
        "conv",
        "linear",
        "transformer",
        "embedding",
        "norms",
    }
    assert choice.optimizers == ("SGD", "Adam", "AdamW") and choice.grad_scaler


def notebook(path, *cells: str) -> None:
    path.write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {"cell_type": "markdown", "id": "m", "metadata": {}, "source": "nn.Conv2d in prose"},
                    *[
                        {
                            "cell_type": "code",
                            "id": f"c{i}",
                            "metadata": {},
                            "source": c,
                            "outputs": [],
                            "execution_count": None,
                        }
                        for i, c in enumerate(cells)
                    ],
                ],
            }
        )
    )


def test_the_notebooks_code_cells_are_read_and_bad_files_give_nothing(tmp_path, monkeypatch):
    good = tmp_path / "train.ipynb"
    notebook(good, "import torch", "model = nn.Linear(3, 3)")
    assert warmup_sources.notebook_code(good) == "import torch\nmodel = nn.Linear(3, 3)"  # no markdown
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    assert warmup_sources.notebook_code(tmp_path / "broken.ipynb") == ""
    assert warmup_sources.notebook_code(tmp_path / "missing.ipynb") == ""
    os.mkfifo(tmp_path / "fifo.ipynb")  # no writer: reading it would block the warm-up for good
    assert warmup_sources.notebook_code(tmp_path / "fifo.ipynb") == ""
    monkeypatch.setattr(warmup_sources, "MAX_NOTEBOOK_BYTES", 10)
    assert warmup_sources.notebook_code(good) == ""  # too large: left out, not read


def test_the_kernel_reads_its_notebook_history_and_objects(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    path = tmp_path / "train.ipynb"
    notebook(path, "model = nn.Linear(3, 3)")
    monkeypatch.setitem(shell.user_ns, "__session__", str(path))
    monkeypatch.setitem(
        shell.user_ns, "held", torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1)).to(torch.bfloat16)
    )
    monkeypatch.setitem(
        shell.user_ns, "opt", torch.optim.Adam([torch.nn.Parameter(torch.ones(1))], foreach=False)
    )
    found = warmup_sources.sources(shell)
    assert found["train.ipynb"] == "model = nn.Linear(3, 3)"
    choice = choose(found)
    assert {"conv", "linear"} <= choice.families and "bf16" in choice.dtypes
    assert choice.optimizers == ("Adam",) and choice.modes == ("for-loop",)
