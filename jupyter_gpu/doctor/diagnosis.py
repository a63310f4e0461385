"""A diagnosis: the checklist plus a one-line verdict that other parts of the package reuse.
As text and HTML it is the package's one ``Report``; as JSON, ``to_json``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ..report import Report, Reportable, Row, Section
from .check import Check, Status, count_names
from .checklist import run_checks
from .facts import Facts

_SEVERITY = {Status.OK: 0, Status.INFO: 1, Status.WARN: 2, Status.FAIL: 3}


@dataclass(repr=False)
class Diagnosis(Reportable):
    """``verdict`` is one line; ``primary`` is the check it came from (None when all is well)."""

    checks: list[Check]
    verdict: str
    cuda_ready: bool
    primary: Check | None
    facts: Facts

    @property
    def status(self) -> Status:
        return max((c.status for c in self.checks), key=_SEVERITY.__getitem__, default=Status.OK)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "cuda_ready": self.cuda_ready,
            "status": self.status.value,
            "primary": self.primary.id if self.primary else None,
            "checks": [dataclasses.asdict(c) | {"status": c.status.value} for c in self.checks],
            "facts": dataclasses.asdict(self.facts),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def as_report(self) -> Report:
        rows = [
            Row(c.title, note=c.summary, status=c.status.value, fix=c.fix, detail=c.detail)
            for c in self.checks
        ]
        status = Status.OK if self.cuda_ready and self.primary is None else self.status
        return Report(
            [Section(rows=rows)], heading=self.verdict, status=status.value, css_class="jupyter-gpu-doctor"
        )


def evaluate(facts: Facts) -> Diagnosis:
    """Run the checks over gathered facts and decide the verdict."""
    checks = run_checks(facts)
    fails = [c for c in checks if c.status is Status.FAIL]
    warns = [c for c in checks if c.status is Status.WARN]
    t = facts.torch
    if t.available:
        verdict = f"CUDA ready: {count_names(d['name'] for d in t.devices)}, torch {t.version}"
        if facts.nvml.driver_version:
            verdict += f", driver {facts.nvml.driver_version}"
        if fails:
            return Diagnosis(checks, f"{verdict}; but {fails[0].summary}", True, fails[0], facts)
        if warns:
            verdict += f" ({len(warns)} warning{'s' if len(warns) > 1 else ''})"
        return Diagnosis(checks, verdict, True, None, facts)
    primary = (fails or warns)[0] if fails or warns else None
    reason = primary.summary if primary else "torch reports no usable GPU"
    unanswered = t.installed is None or (t.runtime_probed and t.available is None)
    if unanswered and facts.nvml.error_kind is None and facts.nvml.devices:
        # torch could not say; the driver sees the GPUs: the problem is not their absence
        names = count_names(d.name for d in facts.nvml.devices)
        return Diagnosis(checks, f"{names} found, but {reason}", False, primary, facts)
    return Diagnosis(checks, f"No GPU: {reason}", False, primary, facts)
