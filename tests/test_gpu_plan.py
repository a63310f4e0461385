"""%gpu_plan on the CPU (issue #30): the figures torch's trackers give for small models built on
the meta device, the strategies' order, a model that cannot fit, --max-batch's boundary, no
memory and no CUDA used, bad arguments as one line, and the magic in a real kernel. Plans run in
a process of their own (support/plan_process.py), as in a kernel; argument errors are checked in
the test's shell."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from support.ipython_shell import shell_with  # noqa: E402
from support.kernel_client import RealKernel  # noqa: E402
from support.paths import TESTS  # noqa: E402
from support.plan_models import GPT  # noqa: E402
from support.plan_process import PlanProcess, plan_process  # noqa: E402
from support.usage_error import one_usage_error  # noqa: E402

from jupyter_gpu.analysis.plan_figures import CATEGORY  # noqa: E402
from jupyter_gpu.kernel.plan import magic  # noqa: E402

MiB = 2**20
FIELDS = {
    "strategy",
    "peak_bytes",
    "parameters_bytes",
    "gradients_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "fits",
    "step_seconds",
}


@pytest.fixture
def ip():
    yield from shell_with(magic.register)


@pytest.fixture(scope="module")
def planner():
    yield from plan_process()


def gpt(**sizes) -> tuple[str, dict]:
    """A GPT built on the meta device in the planning process."""
    return ("gpt", sizes)


def gpt_on_meta(**sizes) -> torch.nn.Module:
    with torch.device("meta"):
        return GPT(**sizes)


def tokens(batch: int, length: int = 64) -> str:
    return f'--input "torch.randint(0, 512, ({batch}, {length}))"'


def test_parameters_take_4_bytes_and_adamw_state_8_per_parameter_in_the_steady_step(planner: PlanProcess):
    numel = sum(p.numel() for p in gpt_on_meta().parameters())
    result = planner.plan(f"model {tokens(4)} --strategies plain --device-memory 1GiB", model=gpt())
    (row,) = result.rows
    assert FIELDS <= row.keys()
    assert row["parameters_bytes"] == 4 * numel
    assert row["optimizer_bytes"] == 8 * numel  # exp_avg and exp_avg_sq; AdamW's step temporaries apart
    assert row["temporaries_bytes"] > 0
    parts = ("parameters", "gradients", "optimizer", "activations", "temporaries", "inputs")
    assert row["peak_bytes"] == sum(row[f"{p}_bytes"] for p in parts)
    assert row["fits"] is True and row["step_seconds"] is None  # no GPU's specifications here
    text, html = result.text, result.html
    assert "Cheapest that fits in 1.00 GiB per GPU: plain" in text and "runs as it is" in text
    assert "standing in for CUDA" in text and "Step times need" in text
    assert "<table>" in html and "plain" in html
    assert not result.cuda_initialized


def test_activations_grow_with_the_batch_and_the_sequence(planner: PlanProcess):
    def activations(batch: int, length: int) -> int:
        line = f"model {tokens(batch, length)} --strategies plain --optimizer sgd --device-memory 1GiB"
        return planner.plan(line, model=gpt()).rows[0]["activations_bytes"]

    base = activations(4, 64)
    assert 1.9 < activations(8, 64) / base < 2.1
    assert 1.9 < activations(4, 128) / base < 2.1  # SDPA keeps no sequence x sequence matrix


def test_checkpointing_and_fsdp_lower_the_peak_and_ddp_adds_its_buckets(planner: PlanProcess):
    result = planner.plan(
        f"model {tokens(8)} --gpus 4 --strategies plain,checkpoint,sac,ddp,fsdp,fsdp+offload "
        "--device-memory 80GiB",
        model=gpt(),
    )
    peak = {r["strategy"]: r["peak_bytes"] for r in result.rows}
    assert not [r for r in result.rows if r["error"]], result.rows
    assert peak["checkpoint"] < peak["sac"] < peak["plain"]
    assert peak["fsdp+offload"] < peak["fsdp"] < peak["plain"]
    plain, ddp = result.rows[0], result.rows[3]
    assert ddp["peak_bytes"] == plain["peak_bytes"] + plain["parameters_bytes"]  # a bucket per gradient
    assert result.process_group is None and result.kept_group  # the fake process group is gone again
    assert "Cheapest that fits in 80.0 GiB per GPU: plain" in result.text


def test_the_cheapest_strategy_that_fits_comes_with_the_line_that_runs_it(planner: PlanProcess):
    first = planner.plan(f"model {tokens(8)} --strategies plain,checkpoint --device-memory 1GiB", model=gpt())
    budget = (first.rows[0]["peak_bytes"] + first.rows[1]["peak_bytes"]) // 2 / 0.95
    result = planner.plan(
        f"model {tokens(8)} --strategies plain,checkpoint --device-memory {budget:.0f}", model=gpt()
    )
    assert [r["fits"] for r in result.rows] == [False, True]
    assert "checkpoint" in result.text.splitlines()[0]
    assert "jupyter_gpu.recompute.checkpoint_blocks(model)" in result.text


def test_a_model_that_cannot_fit_says_so_and_why(planner: PlanProcess):
    result = planner.plan(
        f"model {tokens(4)} --strategies plain,checkpoint --device-memory 4MiB", model=gpt()
    )
    heading = result.text.splitlines()[0]
    assert heading.startswith("Nothing fits in 4.00 MiB per GPU")
    assert "parameters, gradients and optimizer state alone take" in heading
    assert all(r["fits"] is False for r in result.rows)


def test_a_model_of_tens_of_gigabytes_is_planned_without_memory_or_cuda(planner: PlanProcess):
    model = gpt(vocab=50000, width=8192, depth=2, heads=64, context=2048)  # 2.4e9 parameters
    result = planner.plan(f"model {tokens(4, 2048)} --strategies plain --device-memory 40GiB", model=model)
    row = result.rows[0]
    assert row["peak_bytes"] > 30 * 2**30, row
    assert row["fits"] is False
    assert result.grown_bytes < 300 * MiB, f"the kernel grew by {result.grown_bytes / MiB:.0f} MiB"
    assert not result.cuda_initialized


def test_max_batch_is_the_boundary(planner: PlanProcess):
    model = gpt(depth=1)
    line = 'model --input "torch.randint(0, 512, ({}, 64))" --strategies plain --device-memory 24MiB'
    found = planner.plan(line.format(4) + " --max-batch", model=model).rows[0]["max_batch"]
    assert found and found > 4
    assert planner.plan(line.format(found), model=model).rows[0]["fits"] is True
    assert planner.plan(line.format(found + 1), model=model).rows[0]["fits"] is False


def test_convolutions_hold_cudnn_workspaces_in_the_peak_but_not_in_whether_it_fits(planner: PlanProcess):
    line = 'model --input "torch.randn(8, 3, 64, 64)" --target "torch.randint(0, 10, (8,))" '
    line += "--loss cross_entropy --strategies plain --device-memory {}"
    row = planner.plan(line.format("1GiB"), model=("cnn", {"channels": 16})).rows[0]
    # one workspace at a time, the largest the second convolution's: its 16-channel 64x64 input
    # and its 32-channel 32x32 output (or their gradients), fp32
    largest_pass = (8 * 16 * 64 * 64 + 8 * 32 * 32 * 32) * 4
    assert 0 < row["workspace_bytes"] <= largest_pass
    assert row["temporaries_bytes"] >= row["workspace_bytes"]
    least = row["peak_bytes"] - row["workspace_bytes"]
    between = (least + row["peak_bytes"]) // 2
    # a budget between the least the step needs and its peak with workspaces still fits
    planned = planner.plan(line.format(int(between / 0.95) + 1), model=("cnn", {"channels": 16}))
    assert planned.rows[0]["fits"] is True
    assert "cuDNN workspaces" in planned.text


def test_multihead_attention_is_planned(planner: PlanProcess):
    result = planner.plan(
        'encoder --input "torch.randn(4, 32, 64)" --strategies plain --device-memory 1GiB',
        encoder=("encoder", {}),
    )
    assert result.rows[0]["error"] is None and result.rows[0]["activations_bytes"] > 0


def test_a_process_group_of_the_users_is_left_alone(planner: PlanProcess, tmp_path):
    result = planner.plan(
        f"model {tokens(4)} --gpus 2 --strategies plain,fsdp --device-memory 1GiB",
        group_store=str(tmp_path / "store"),
        model=gpt(),
    )
    fsdp = result.rows[1]
    assert fsdp["peak_bytes"] is None and "a process group of its own" in fsdp["error"]
    assert result.rows[0]["error"] is None
    assert result.process_group == "gloo" and result.kept_group  # the user's group, untouched


def test_the_trackers_categories_are_the_ones_the_plan_adds_up():
    """Pinned: torch.distributed._tools is private; its categories' names must stay known."""
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType
    from torch.distributed._tools.mem_tracker import _MemRefType

    assert {c.value for c in (*_MemRefType, *_FSDPRefType)} <= CATEGORY.keys()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("model", "the following arguments are required: --input"),
        ("model --input x --strategies plain,zero", "unknown strategy 'zero'"),
        ("model --input x --strategies fsdp", "give --gpus 2 or more"),
        ("model --input x --strategies offload", "write fsdp+offload"),
        ("model --input x --device-memory lots", "'lots' is not a size"),
        ("model --input x --gpus 0", "--gpus must be between 1"),
        ("GPT(depth=1) --input x", "must be a name"),
        ("number --input x", "is a int"),
        ("missing --input x", "NameError"),
        ("model --input 'torch.randn(4, 8'", "--input 'torch.randn(4, 8' failed: SyntaxError"),
        ("model --input 'torch.randn(4, 8)' --batch-dim 2", "--batch-dim 2"),
        ("model --input '\"text\"'", "--input made no tensor"),
    ],
)
def test_bad_arguments_are_one_line(ip, capsys, line, message):
    ip.user_ns.update(torch=torch, GPT=GPT, model=gpt_on_meta(), number=3)
    said = one_usage_error(ip, capsys, f"%gpu_plan {line}")
    assert message in said


def test_the_magic_in_a_real_kernel_plans_without_initialising_cuda(tmp_path):
    kernel = RealKernel(tmp_path)
    try:
        assert kernel.run("%load_ext jupyter_gpu").ok
        setup = kernel.run(
            f"import sys, torch; sys.path.insert(0, {str(TESTS)!r})\n"
            "from support.plan_models import GPT\n"
            "with torch.device('meta'):\n    model = GPT()"
        )
        assert setup.ok, setup.traceback
        cell = kernel.run(
            'plan = %gpu_plan model --input "torch.randint(0, 512, (4, 64))" --strategies plain,amp --device-memory 2GiB\n'
            "plan"
        )
        assert cell.ok, cell.traceback
        assert "Cheapest that fits in 2.00 GiB per GPU: plain" in cell.shown
        assert "amp" in cell.shown and "activations" in cell.shown
        check = kernel.run("print(len(plan.rows), torch.cuda.is_initialized())")
        assert check.stream().split() == ["2", "False"]
    finally:
        kernel.close()
