"""A plan as the package's one ``Report``: the verdict (the cheapest strategy that fits and the line
that runs it, or why nothing fits), one row per strategy, and what the figures leave out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..report import Report, Row, Section
from .plan import USABLE, PlanRow, launch, usable
from .units import format_bytes, format_us

if TYPE_CHECKING:
    from .plan import Plan


def _state_bytes(row: PlanRow) -> int:
    return (row.parameters_bytes or 0) + (row.gradients_bytes or 0) + (row.optimizer_bytes or 0)


def why_not(row: PlanRow, device_bytes: int) -> str:
    """Why the strategy with the lowest peak does not fit, and what would help."""
    state = _state_bytes(row)
    if state > usable(device_bytes):
        return (
            f"its parameters, gradients and optimizer state alone take {format_bytes(state)} per GPU, "
            f"over {format_bytes(device_bytes)}: shard them over more GPUs (--gpus N, fsdp), or keep "
            "the parameters in bf16 (--dtype bf16)"
        )
    return (
        f"parameters, gradients and optimizer state take {format_bytes(state)}; the batch's "
        f"activations and temporaries take the rest: a smaller batch fits (--max-batch finds the largest)"
    )


def _note(row: PlanRow) -> str:
    if row.error:
        return f"not planned: {row.error}"
    parts = [
        f"parameters {format_bytes(row.parameters_bytes)}",
        f"gradients {format_bytes(row.gradients_bytes)}",
        f"optimizer {format_bytes(row.optimizer_bytes)}",
        f"activations {format_bytes(row.activations_bytes)}",
        f"temporaries {format_bytes(row.temporaries_bytes)}"
        + (f" (cuDNN workspaces {format_bytes(row.workspace_bytes)})" if row.workspace_bytes else ""),
        f"inputs {format_bytes(row.inputs_bytes)}",
    ]
    text = ", ".join(parts)
    if row.fits is not None:
        text += "; fits" if row.fits else "; does NOT fit"
    if row.step_seconds is not None:
        text += f"; step ~{format_us(row.step_seconds * 1e6)} (roofline estimate)"
    if row.max_batch == 0:
        text += "; not even a batch of 1 fits"
    elif row.max_batch is not None:
        text += f"; largest batch that fits: {row.max_batch}"
    if row.derived:
        text += f" ({row.derived})"
    return text


def _label(row: PlanRow) -> str:
    return f"{row.strategy} ({row.gpus} GPUs)" if row.gpus > 1 else row.strategy


def verdict(plan: Plan) -> tuple[str, str | None]:
    """The heading and its status colour."""
    device = plan.device_bytes
    choice = plan.choice
    if device is None:
        return "No device memory to compare with: give --device-memory (e.g. 80GiB).", None
    if choice is not None:
        how = launch(choice.strategy, choice.gpus).sentence()
        return (
            f"Cheapest that fits in {format_bytes(device)} per GPU: {_label(choice)}, peak "
            f"{format_bytes(choice.peak_bytes)}; {how}.",
            "ok",
        )
    planned = [r for r in plan.table if r.peak_bytes is not None]
    if not planned:
        return "No strategy could be planned: see each row's reason.", "fail"
    lowest = min(planned, key=lambda r: r.peak_bytes or 0)
    return (
        f"Nothing fits in {format_bytes(device)} per GPU. Lowest peak: {_label(lowest)}, "
        f"{format_bytes(lowest.peak_bytes)}: {why_not(lowest, device)}.",
        "fail",
    )


def render(plan: Plan) -> Report:
    heading, status = verdict(plan)
    about = Section(f"gpu_plan: {plan.model}")
    about.add("parameters", f"{plan.parameters:,}")
    about.add("batch", "n/a" if plan.batch is None else str(plan.batch), "per GPU")
    about.add(
        "device memory",
        format_bytes(plan.device_bytes),
        f"{plan.device_source}; a step fits within {USABLE:.0%} of it, the rest is kept for what "
        "the plan does not see",
    )
    about.add(
        "measured on", plan.measured_on, "a steady-state step: the second, after the optimizer's state exists"
    )
    table = Section(
        "peak per GPU, and what makes it",
        [Row(_label(r), format_bytes(r.peak_bytes), _note(r), strong=r is plan.choice) for r in plan.table],
    )
    return Report(
        [about, table], heading=heading, status=status, notes=plan.notes, css_class="jupyter-gpu-plan"
    )
