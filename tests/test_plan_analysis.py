"""%gpu_plan's pure side (issue #30): strategy names, the choice among rows, the launch lines, the
sizes it reads, and the --max-batch search."""

from __future__ import annotations

import pytest

from jupyter_gpu.analysis.plan import (
    PlanRow,
    cheapest,
    launch,
    parse_bytes,
    parse_strategies,
    strategy_features,
    with_budget,
)
from jupyter_gpu.analysis.plan_search import MAX_BATCH, largest_fitting, linear_guess


@pytest.mark.parametrize(
    ("text", "gpus", "names"),
    [
        (None, 1, ["plain", "amp", "sac", "checkpoint"]),
        (None, 4, ["plain", "amp", "sac", "checkpoint", "ddp", "fsdp", "fsdp+amp", "fsdp+offload"]),
        ("amp+fsdp, offload+fsdp,plain,plain", 2, ["fsdp+amp", "fsdp+offload", "plain"]),
    ],
)
def test_strategies_are_named_one_way(text, gpus, names):
    assert parse_strategies(text, gpus) == names


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ddp+fsdp", "exclude each other"),
        ("checkpoint+sac", "exclude each other"),
        ("offload", r"fsdp\+offload"),
        ("zero3", "unknown strategy"),
    ],
)
def test_impossible_strategies_say_why(name, message):
    with pytest.raises(ValueError, match=message):
        strategy_features(name)


@pytest.mark.parametrize(
    ("name", "gpus", "sentence"),
    [
        ("plain", 1, "runs as it is"),
        ("amp", 1, "`%%amp --dtype bf16`"),
        ("checkpoint", 1, "call `jupyter_gpu.recompute.checkpoint_blocks(model)` once before training"),
        ("ddp+amp", 4, "`%%ddp_launch -n 4 --amp bf16`"),
        ("fsdp+offload", 8, "`%%ddp_launch -n 8 --fsdp`, and in the cell `shard(model, cpu_offload=True)`"),
        ("fsdp+amp", 2, "`%%ddp_launch -n 2 --fsdp`, and in the cell `shard(model, mixed_precision='bf16')`"),
    ],
)
def test_each_strategy_comes_with_the_line_that_runs_it(name, gpus, sentence):
    assert launch(name, gpus).sentence() == sentence


def _row(strategy: str, peak: int, gpus: int = 1, seconds: float | None = None) -> PlanRow:
    return with_budget(PlanRow(strategy, gpus, 8, peak, step_seconds=seconds), 100)


def test_the_cheapest_that_fits_uses_fewest_gpus_then_fewest_compromises():
    rows = [_row("plain", 120), _row("checkpoint", 60), _row("amp", 90), _row("fsdp", 30, gpus=4)]
    assert cheapest(rows).strategy == "amp"  # 90 is within 95% of 100; 120 is not
    assert cheapest([_row("plain", 96), _row("fsdp", 30, gpus=4)]).strategy == "fsdp"  # 96 > 95
    assert cheapest([_row("plain", 200)]) is None


def test_estimated_step_times_decide_where_every_candidate_has_one():
    rows = [_row("amp", 80, seconds=0.2), _row("checkpoint", 50, seconds=0.1)]
    assert cheapest(rows).strategy == "checkpoint"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80GiB", 80 * 2**30),
        ("40 GB", 40 * 10**9),
        ("8e9", 8 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
    ],
)
def test_sizes_are_read_as_people_write_them(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["lots", "0", "-1GiB", "12 parsecs"])
def test_a_size_that_is_none_is_refused(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


@pytest.mark.parametrize("boundary", [1, 2, 7, 64, 1000, 12345])
@pytest.mark.parametrize("guess", [1, 5, 100, 20000])
def test_the_search_finds_the_boundary_from_any_guess(boundary, guess):
    probes: list[int] = []

    def fits(batch: int) -> bool:
        probes.append(batch)
        return batch <= boundary

    assert largest_fitting(fits, guess) == boundary
    assert len(probes) <= 2 * (abs(boundary - guess).bit_length() + 2)


def test_the_search_says_when_nothing_fits_and_stops_at_its_limit():
    assert largest_fitting(lambda b: False, 50) is None
    assert largest_fitting(lambda b: True, 50) == MAX_BATCH


def test_a_linear_guess_lands_on_the_line():
    # peak = 1000 + 10 * batch: the budget 1500 is crossed at batch 50
    assert linear_guess(4, 1040, 8, 1080, 1500) == 50
    assert linear_guess(4, 1040, 8, 1040, 1500) == MAX_BATCH  # flat: no crossing
