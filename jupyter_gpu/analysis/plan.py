"""What ``%gpu_plan`` decides, as pure functions: the strategies and their names, one row per
strategy, which strategy is the cheapest that fits, the line that runs it, DDP's figures from a
plain step's, and the size arguments it reads.

The figures themselves are measured on fake tensors by ``jupyter_gpu.kernel.plan``; nothing here
knows about torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace

from ..report import Report, Reportable

# A strategy is a set of features; its name lists them in this order, joined by "+".
FEATURES = ("ddp", "fsdp", "offload", "checkpoint", "sac", "amp", "amp-fp16")
# How much a feature costs you besides memory, for choosing among strategies that fit when no
# step time is known: mixed precision changes numerics a little, selective checkpointing
# recomputes cheap ops, full checkpointing recomputes the whole forward, offload moves every
# shard over PCIe each step. More GPUs always cost more.
_COST = {"amp": 1, "amp-fp16": 1, "sac": 2, "checkpoint": 3, "fsdp": 1, "ddp": 0, "offload": 4}
PLAIN = "plain"
DEFAULT_ONE_GPU = ("plain", "amp", "sac", "checkpoint")
DEFAULT_MANY_GPUS = ("ddp", "fsdp", "fsdp+amp", "fsdp+offload")
AMP_DTYPE = {"amp": "bf16", "amp-fp16": "fp16"}


def strategy_features(name: str) -> frozenset[str]:
    """The features of a strategy's name ("fsdp+amp"); ValueError says what is wrong with it."""
    if name == PLAIN:
        return frozenset()
    parts = [p.strip() for p in name.split("+")]
    unknown = [p for p in parts if p not in FEATURES]
    if unknown or not parts:
        raise ValueError(
            f"unknown strategy {name!r}: use plain or {', '.join(FEATURES)}, joined with + (fsdp+amp)"
        )
    features = frozenset(parts)
    for a, b in (("ddp", "fsdp"), ("checkpoint", "sac"), ("amp", "amp-fp16")):
        if {a, b} <= features:
            raise ValueError(f"{name!r}: {a} and {b} exclude each other")
    if "offload" in features and "fsdp" not in features:
        raise ValueError(f"{name!r}: offload keeps FSDP's shards on the CPU; write fsdp+offload")
    return features


def strategy_name(features: Iterable[str]) -> str:
    """The one spelling of a set of features ("fsdp+offload", "plain")."""
    chosen = set(features)
    return "+".join(f for f in FEATURES if f in chosen) or PLAIN


def parse_strategies(text: str | None, gpus: int) -> list[str]:
    """``--strategies a,b,...`` as canonical names, in the order given, each once; without it
    the defaults for one GPU, and those for ``gpus`` when there are several."""
    if text is None:
        return list(DEFAULT_ONE_GPU + (DEFAULT_MANY_GPUS if gpus > 1 else ()))
    names: list[str] = []
    for token in filter(None, (t.strip() for t in text.split(","))):
        name = strategy_name(strategy_features(token))
        if gpus < 2 and strategy_features(name) & {"ddp", "fsdp"}:
            raise ValueError(f"{token} spreads the model over GPUs: give --gpus 2 or more")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("--strategies names none: e.g. --strategies plain,amp,fsdp")
    return names


def strategy_gpus(name: str, gpus: int) -> int:
    return gpus if strategy_features(name) & {"ddp", "fsdp"} else 1


@dataclass(frozen=True)
class Launch:
    """How to run a strategy: the magic's line, and what the cell (or the notebook) calls."""

    magic: str | None
    call: str | None

    def sentence(self) -> str:
        if self.magic is None and self.call is None:
            return "runs as it is"
        if self.magic is None:
            return f"call `{self.call}` once before training"
        return f"`{self.magic}`" + (f", and in the cell `{self.call}`" if self.call else "")


def launch(name: str, gpus: int) -> Launch:
    """The ``%%ddp_launch`` / ``%%amp`` line (and call) that runs strategy ``name``."""
    features = strategy_features(name)
    amp = next((AMP_DTYPE[f] for f in ("amp", "amp-fp16") if f in features), None)
    recompute = (
        "jupyter_gpu.recompute.checkpoint_blocks(model"
        + (", selective=True" if "sac" in features else "")
        + ")"
        if features & {"checkpoint", "sac"}
        else None
    )
    if "fsdp" in features:
        options = [f"mixed_precision={amp!r}"] if amp else []
        options += ["cpu_offload=True"] if "offload" in features else []
        call = f"shard(model{''.join(', ' + o for o in options)})"
        return Launch(f"%%ddp_launch -n {gpus} --fsdp", f"{recompute}; {call}" if recompute else call)
    if "ddp" in features:
        return Launch(f"%%ddp_launch -n {gpus}" + (f" --amp {amp}" if amp else ""), recompute)
    return Launch(f"%%amp --dtype {amp}" if amp else None, recompute)


@dataclass(frozen=True)
class PlanRow:
    """One strategy's steady-state training step, per GPU, in bytes at the step's peak."""

    strategy: str
    gpus: int
    batch: int | None
    peak_bytes: int | None
    parameters_bytes: int | None = None  # parameters and buffers (FSDP: shards and gathered ones)
    gradients_bytes: int | None = None
    optimizer_bytes: int | None = None  # optimizer state only
    activations_bytes: int | None = None  # saved for backward (and recomputed) at the peak
    temporaries_bytes: int | None = None  # backward and optimizer-step temporaries, collectives' buffers
    inputs_bytes: int | None = None  # the batch and its target
    workspace_bytes: int | None = None  # cuDNN's estimated workspaces in the peak (in temporaries)
    fits: bool | None = None  # None: no device memory to compare with
    step_seconds: float | None = None  # roofline estimate; None without a GPU's specifications
    max_batch: int | None = None  # with --max-batch
    derived: str | None = None  # how the row was derived when it was not measured on its own
    error: str | None = None  # why this strategy could not be planned

    def as_mapping(self) -> dict[str, object]:
        return asdict(self)


# A step fits when its peak is within this share of the device's memory: the rest is kept for
# what the plan does not see (the allocator's rounding and fragmentation, cuBLAS's workspace),
# which measured 0.3% to 2% of the peak on an H200 (README).
USABLE = 0.95


def usable(device_bytes: int) -> int:
    return int(device_bytes * USABLE)


def with_budget(row: PlanRow, device_bytes: int | None) -> PlanRow:
    """``row`` with ``fits`` set against ``device_bytes`` per GPU (less the headroom). cuDNN's
    workspaces do not count: short of memory, cuDNN picks algorithms that need less."""
    if device_bytes is None or row.peak_bytes is None:
        return replace(row, fits=None)
    fits = row.peak_bytes - (row.workspace_bytes or 0) <= usable(device_bytes)
    return replace(row, fits=fits)


def ddp_row(plain: PlanRow, gpus: int, name: str, bucket_bytes: int) -> PlanRow:
    """DDP per GPU from the same step without it: DDP's reducer keeps gradient buckets as big as
    every gradient together (``bucket_bytes``) for the whole run, unless the model is wrapped with
    ``gradient_as_bucket_view=True``. The batch is per rank."""
    return replace(
        plain,
        strategy=name,
        gpus=gpus,
        peak_bytes=None if plain.peak_bytes is None else plain.peak_bytes + bucket_bytes,
        gradients_bytes=(plain.gradients_bytes or 0) + bucket_bytes,
        derived=f"{strategy_name(strategy_features(name) - {'ddp'})} plus DDP's gradient buckets",
    )


def _cost(name: str) -> int:
    return sum(_COST[f] for f in strategy_features(name))


def cheapest(rows: Sequence[PlanRow]) -> PlanRow | None:
    """The strategy that fits at the least cost: fewest GPUs, then the shortest estimated step
    where every candidate has one, else the fewest compromises (``_COST``), then the lowest peak."""
    fitting = [r for r in rows if r.fits]
    timed = all(r.step_seconds is not None for r in fitting)
    return min(
        fitting,
        key=lambda r: (r.gpus, r.step_seconds if timed else _cost(r.strategy), r.peak_bytes or 0),
        default=None,
    )


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[0-9]+)?)\s*([kmgtp]?)(i?)b?\s*$", re.I)


def parse_bytes(text: str) -> int:
    """ "80GiB", "80 GB", "8e9", "512MiB" as bytes; ValueError for anything else (or zero)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size: write e.g. 80GiB, 40GB or 8e9")
    number, prefix, binary = match.groups()
    power = "kmgtp".find(prefix.lower()) + 1 if prefix else 0
    value = int(float(number) * (1024 if binary or not prefix else 1000) ** power)
    if value <= 0:
        raise ValueError(f"{text!r}: the device memory must be more than 0 bytes")
    return value


@dataclass(repr=False)
class Plan(Reportable):
    """What ``%gpu_plan`` returns: ``rows`` (one mapping per strategy), the cheapest strategy
    that fits and how to run it, against ``device_bytes`` per GPU."""

    model: str
    parameters: int
    batch: int | None
    device_bytes: int | None
    device_source: str
    measured_on: str
    table: list[PlanRow]
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[dict[str, object]]:
        return [r.as_mapping() for r in self.table]

    @property
    def choice(self) -> PlanRow | None:
        return cheapest(self.table)

    def as_report(self) -> Report:
        from .plan_report import render

        return render(self)
