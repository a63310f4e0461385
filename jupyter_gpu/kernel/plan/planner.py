"""A plan: every strategy's step measured (or derived), checked against the device's memory, and
with ``--max-batch`` the largest batch each one fits."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any

import torch

from ...analysis.plan import (
    Plan,
    PlanRow,
    ddp_row,
    strategy_features,
    strategy_gpus,
    with_budget,
)
from ...analysis.plan_search import largest_fitting, linear_guess
from .fake_group import NoFakeGroup, fake_mesh
from .fake_world import FakeWorld, PlanError, build_model
from .step import Measured, StepSpec, measure

STAND_IN = (
    "Measured on fake CPU tensors standing in for CUDA: this kernel has not initialised CUDA, and "
    "faking CUDA tensors would. Attention kernels and autocast's op lists are then the CPU's; "
    "after your notebook has used the GPU, the plan runs on fake CUDA tensors."
)
NO_TIMES = (
    "Step times need the GPU's peak FLOP/s and memory bandwidth, which torch reads only once CUDA "
    "is initialised: {why}"
)
NOT_SEEN = (
    "Not in these figures: the CUDA context, cuBLAS's workspace, NCCL buffers, the caching "
    "allocator's fragmentation, and memory other processes hold (see the README)."
)
WORKSPACES = (
    "Convolutions: the peak holds cuDNN's workspaces as estimated from an H200's (about the "
    "activations each pass reads and writes); whether a step fits is judged without them, since "
    "cuDNN settles for algorithms with smaller workspaces when memory is short."
)
SAC = (
    "sac is torchtitan's selective policy (keep matmul, convolution and attention outputs), "
    "measured like the others; torch's SACEstimator (the best policy for a budget) is not run."
)


@dataclass(frozen=True)
class PlanRequest:
    spec: StepSpec
    model_label: str
    strategies: list[str]
    gpus: int
    device_bytes: int | None
    device_source: str
    max_batch: bool


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class _Planner:
    def __init__(self, request: PlanRequest, world: FakeWorld, mesh: Any, mesh_error: str | None) -> None:
        self.request = request
        self.world = world
        self.mesh = mesh
        self.mesh_error = mesh_error
        self._cache: dict[tuple[frozenset[str], int, bool, bool], Measured] = {}
        self.time_errors: set[str] = set()

    def _measure(self, features: frozenset[str], batch: int, timed: bool, workspaces: bool) -> Measured:
        key = (features, batch, timed, workspaces)
        if key not in self._cache:
            if "fsdp" in features and self.mesh is None:
                raise PlanError(self.mesh_error or "no process group")
            self._cache[key] = measure(
                self.request.spec, self.world, features, batch, self.mesh, timed, workspaces
            )
        return self._cache[key]

    def row(self, name: str, batch: int, timed: bool, workspaces: bool = True) -> PlanRow:
        """Strategy ``name`` at ``batch``: measured, or for DDP derived from the step without it.
        With ``workspaces``, the peak holds cuDNN's estimated workspaces and the row says how
        much of it they are (a second step measured without them); without, it is the least
        the step needs, which is what decides whether it fits."""
        features = strategy_features(name)
        gpus = strategy_gpus(name, self.request.gpus)
        base = features - {"ddp"}
        measured = self._measure(base, batch, timed, workspaces)
        workspace = None
        if workspaces and measured.convolutions:
            workspace = measured.peak_bytes - self._measure(base, batch, False, False).peak_bytes
        if measured.time_error:
            self.time_errors.add(measured.time_error)
        f = measured.figures
        row = PlanRow(
            strategy=name,
            gpus=gpus,
            batch=batch,
            peak_bytes=measured.peak_bytes,
            parameters_bytes=f["parameters"],
            gradients_bytes=f["gradients"],
            optimizer_bytes=f["optimizer"],
            activations_bytes=f["activations"],
            temporaries_bytes=f["temporaries"],
            inputs_bytes=f["inputs"],
            workspace_bytes=workspace,
            step_seconds=measured.step_seconds,
            derived="CPU offload estimated: the FSDP peak less the shards, their gradients and the optimizer"
            if "offload" in features and self.world.stand_in
            else None,
        )
        if "ddp" in features:
            row = ddp_row(row, gpus, name, measured.gradients_bytes)
        return with_budget(row, self.request.device_bytes)

    def fits(self, name: str, batch: int) -> bool:
        try:
            return bool(self.row(name, batch, timed=False, workspaces=False).fits)
        except Exception:
            return False  # a batch too large for an op's index type does not fit either

    def planned(self, name: str) -> PlanRow:
        batch = self.request.spec.batch.size
        try:
            row = self.row(name, batch, timed=self.world.device == "cuda")
        except (PlanError, NoFakeGroup) as exc:
            return self._failed(name, str(exc))
        except Exception as exc:  # an op torch cannot run on fake tensors, a model's own error
            return self._failed(name, _one_line(exc))
        budget = self.request.device_bytes
        if self.request.max_batch and budget is not None and row.peak_bytes is not None:
            least = row.peak_bytes - (row.workspace_bytes or 0)
            row = replace(row, max_batch=self._max_batch(name, least, budget))
        return row

    def _max_batch(self, name: str, peak: int, budget: int) -> int:
        """The largest batch that fits (0: not even 1), searched around where the peaks of this
        batch and twice it say the line crosses the budget."""
        batch = self.request.spec.batch.size
        try:
            larger = self.row(name, 2 * batch, timed=False, workspaces=False).peak_bytes or peak
        except Exception:
            larger = peak
        guess = linear_guess(batch, peak, 2 * batch, larger, budget)
        return largest_fitting(lambda b: self.fits(name, b), guess) or 0

    def _failed(self, name: str, why: str) -> PlanRow:
        gpus = strategy_gpus(name, self.request.gpus)
        return PlanRow(
            strategy=name, gpus=gpus, batch=self.request.spec.batch.size, peak_bytes=None, error=why
        )


def _parameters(request: PlanRequest, world: FakeWorld) -> int:
    model = build_model(request.spec.source, world, request.spec.dtype)
    return sum(p.numel() for p in model.parameters())


def make_plan(request: PlanRequest) -> Plan:
    """Plan ``request`` on fake tensors: no real memory, no CUDA call in a kernel without CUDA."""
    world = FakeWorld.for_this_kernel()
    sharded = any("fsdp" in strategy_features(n) for n in request.strategies)
    with contextlib.ExitStack() as stack:
        mesh, mesh_error = None, None
        if sharded:
            try:
                mesh = stack.enter_context(fake_mesh(request.gpus, world.device))
            except NoFakeGroup as exc:
                mesh_error = str(exc)
        planner = _Planner(request, world, mesh, mesh_error)
        rows = [planner.planned(name) for name in request.strategies]
    return Plan(
        model=request.model_label,
        parameters=_parameters(request, world),
        batch=request.spec.batch.size,
        device_bytes=request.device_bytes,
        device_source=request.device_source,
        measured_on="CUDA (fake tensors)" if world.device == "cuda" else "CPU standing in for CUDA",
        table=rows,
        notes=_notes(request, world, planner.time_errors) + _workspace_note(rows),
    )


def _notes(request: PlanRequest, world: FakeWorld, time_errors: set[str]) -> list[str]:
    notes = [STAND_IN] if world.stand_in else []
    notes += [f"No step time where torch's RuntimeEstimator failed: {e}" for e in sorted(time_errors)]
    if world.device != "cuda":
        why = (
            "this torch is built without CUDA"
            if not torch.backends.cuda.is_built()
            else "run `%gpu_plan` again after your notebook has used the GPU"
        )
        notes.append(NO_TIMES.format(why=why))
    names = [strategy_features(n) for n in request.strategies]
    if any("fsdp" in f for f in names) and world.device == "cuda":
        notes.append("FSDP rows have no step time: torch's RuntimeEstimator does not see through DTensor.")
    if any("ddp" in f for f in names):
        notes.append(
            "DDP rows: the same step plus DDP's gradient buckets (one more copy of the gradients; "
            "`gradient_as_bucket_view=True` saves it). The batch is per GPU."
        )
    if any("sac" in f for f in names):
        notes.append(SAC)
    notes.append(NOT_SEEN)
    return notes


def _workspace_note(rows: list[PlanRow]) -> list[str]:
    return [WORKSPACES] if any(r.workspace_bytes for r in rows) else []
