"""What the server's GPM samples add to a profiled cell (jupyter_gpu.analysis.profile_activity):
which samples count for the cell's window, what a reply without figures gives, the hint when
NVML's utilisation is high but SM activity low, and the report's line for each GPU."""

from __future__ import annotations

import math
from typing import Any

import pytest
from support.profile_traces import Trace, tiny_ops_loop

from jupyter_gpu.analysis.profile import analyse
from jupyter_gpu.analysis.profile_activity import (
    BUSY_UTILISATION,
    IDLE_SM,
    CellActivity,
    GpuActivity,
    activity_hints,
    cell_activity,
)
from jupyter_gpu.analysis.profile_hints import LAUNCH_BOUND, Hint
from jupyter_gpu.analysis.profile_trace import trace_devices

UUID0 = "GPU-2da622ba-bcdc-9f07-006d-4b42150c85b5"
UUID1 = "GPU-d57917b3-7a1d-3f45-579e-d0c856ed9f9d"
T0 = 1_764_460_800.0  # the cell starts here
STARVED = "busy by NVML's utilisation, but the SMs are mostly idle"


def gpu(uuid: str = UUID0, index: int = 0, **figures: Any) -> dict[str, Any]:
    """One GPU of a sample, as the server sends it on a GPU with GPM."""
    values = {
        "utilization_gpu_percent": 99,
        "sm_active_percent": 0.4,
        "sm_occupancy_percent": 0.1,
        "tensor_active_percent": 0.0,
        "tensor_hmma_active_percent": 0.0,
        "tensor_imma_active_percent": 0.0,
        "tensor_dfma_active_percent": 0.0,
    }
    return {"index": index, "uuid": uuid, "mig": None, "state": "ok", "error": None, **values, **figures}


def reply(samples: list[dict[str, Any]], interval: float = 1.0) -> dict[str, Any]:
    return {"interval": interval, "history": samples, "latest": samples[-1] if samples else None}


def at(t: float, *gpus: dict[str, Any]) -> dict[str, Any]:
    return {"t": t, "gpus": list(gpus) or [gpu()]}


def activity(samples: list[dict[str, Any]], end: float, devices: dict | None = None, **kw: Any):
    return cell_activity(reply(samples, **kw), T0, end, devices or {0: UUID0})


# -- which samples are the cell's ---------------------------------------------------------------


def test_only_samples_the_cell_ran_all_of_count():
    """Samples 1 s apart, stamped 0.3 s into each second: the ones straddling the cell's start and
    end would mix in the idle GPU around it, so their figures must not show."""
    samples = [at(T0 + k + 0.3, gpu(sm_active_percent=sm)) for k, sm in enumerate([90.0, 10.0, 20.0, 90.0])]
    # the cell: T0 .. T0 + 3.0; the spans (T0-0.7, T0+0.3] and (T0+2.3, T0+3.3] straddle its edges
    found = activity(samples, end=T0 + 3.0)
    assert found is not None and found.interval == 1.0 and found.window == pytest.approx(3.0)
    (only,) = found.gpus
    assert only.samples == 2 and only.sm_active_percent == pytest.approx(15.0)
    assert only.device == 0 and only.uuid == UUID0


def test_a_sample_ending_exactly_at_the_cells_end_counts():
    samples = [at(T0 + 1.0), at(T0 + 2.0)]
    (only,) = activity(samples, end=T0 + 2.0).gpus
    assert only.samples == 2


def test_a_cell_shorter_than_two_samples_has_no_figures_and_says_why():
    samples = [at(T0 + 0.5), at(T0 + 1.5)]
    found = activity(samples, end=T0 + 1.2)
    assert found is not None and found.gpus == ()
    text = str(analyse(Trace().trace(0.0, 1.2e6), activity=found))
    line = next(line for line in text.splitlines() if "SM and tensor-core activity" in line)
    assert "none for a cell of 1.2 s" in line and "samples every 1 s" in line
    assert "%" not in line  # no figure of a time that was mostly not the cell's


def test_a_short_cell_with_no_sample_since_it_began_learns_gpm_from_the_latest_sample():
    latest = at(T0 - 0.4)
    found = cell_activity({"interval": 1.0, "history": [], "latest": latest}, T0, T0 + 0.1, {0: UUID0})
    assert found is not None and found.gpus == ()


def test_a_gpus_first_sample_has_no_figures_and_is_not_counted():
    samples = [at(T0 + 1.0, gpu(sm_active_percent=None)), at(T0 + 2.0), at(T0 + 3.0)]
    (only,) = activity(samples, end=T0 + 3.0).gpus
    assert only.samples == 2 and only.sm_active_percent == pytest.approx(0.4)


def test_figures_are_averaged_and_a_missing_one_leaves_the_rest():
    samples = [
        at(
            T0 + 1.0,
            gpu(utilization_gpu_percent=100, tensor_active_percent=80.0, tensor_hmma_active_percent=80.0),
        ),
        at(
            T0 + 2.0,
            gpu(utilization_gpu_percent=90, tensor_active_percent=60.0, tensor_hmma_active_percent=None),
        ),
    ]
    (only,) = activity(samples, end=T0 + 2.0).gpus
    assert only.utilisation_percent == 95.0 and only.tensor_active_percent == 70.0
    assert only.tensor_pipes == {"HMMA": 80.0, "IMMA": 0.0, "DFMA": 0.0}


# -- replies without figures ----------------------------------------------------------------------


def test_a_server_that_predates_gpm_gives_none():
    old = {k: v for k, v in gpu().items() if "active" not in k and "occupancy" not in k}
    assert activity([at(T0 + 1.0, old), at(T0 + 2.0, old)], end=T0 + 2.0) is None


def test_a_gpu_without_gpm_gives_none():
    why = "needs GPU performance monitoring (Hopper or later, driver 520 or newer)"
    without = gpu(sm_active_percent=None, unsupported={"sm_active_percent": why})
    assert activity([at(T0 + 1.0, without), at(T0 + 2.0, without)], end=T0 + 2.0) is None


def test_a_mig_device_gets_none_as_its_gpus_figures_count_other_instances():
    mig = gpu(uuid="MIG-2da622ba-bcdc-9f07-006d-4b42150c85b5", sm_active_percent=None)
    mig["unsupported"] = {"sm_active_percent": "GPU-wide: see GPU 0"}
    assert (
        activity([at(T0 + 1.0, gpu(uuid=UUID1), mig), at(T0 + 2.0, gpu(uuid=UUID1), mig)], end=T0 + 2) is None
    )


def test_a_lost_gpu_and_a_gpu_the_cell_did_not_use_give_none():
    lost = {"index": 0, "uuid": UUID0, "mig": None, "state": "lost", "error": "gone", "unsupported": {}}
    assert activity([at(T0 + 1.0, lost), at(T0 + 2.0, lost)], end=T0 + 2.0) is None
    assert activity([at(T0 + 1.0), at(T0 + 2.0)], end=T0 + 2.0, devices={1: UUID1}) is None


@pytest.mark.parametrize(
    "broken",
    [
        {"interval": 0, "history": [at(T0 + 1.0)], "latest": None},
        {"interval": "1", "history": [at(T0 + 1.0)], "latest": None},
        {"interval": math.nan, "history": [at(T0 + 1.0)], "latest": None},
        {"interval": 1.0, "history": None, "latest": at(T0 + 1.0)},
        {"interval": 1.0, "history": ["x", {"t": "soon", "gpus": [gpu()]}, {"t": T0 + 1, "gpus": {}}]},
        {"interval": 1.0, "history": [at(T0 + 1.0, "not a gpu", gpu(uuid=None))], "latest": 3},
        {},
    ],
)
def test_a_reply_that_is_not_one_gives_none(broken):
    assert cell_activity(broken, T0, T0 + 5.0, {0: UUID0}) is None


def test_odd_figures_are_no_figures():
    samples = [
        at(T0 + 1.0, gpu(sm_active_percent=True, utilization_gpu_percent="99")),
        at(T0 + 2.0, gpu(sm_active_percent=5.0, utilization_gpu_percent=math.inf)),
    ]
    (only,) = activity(samples, end=T0 + 2.0).gpus
    assert only.samples == 1 and only.sm_active_percent == 5.0 and only.utilisation_percent is None


# -- several GPUs -----------------------------------------------------------------------------------


def test_each_gpu_of_the_cell_gets_its_own_figures_under_torchs_index():
    """torch sees the machine's GPU 1 as cuda:0 (CUDA_VISIBLE_DEVICES=1,0): matched by UUID."""
    samples = [
        at(T0 + k, gpu(UUID0, 0, sm_active_percent=90.0), gpu(UUID1, 1, sm_active_percent=3.0))
        for k in (1, 2, 3)
    ]
    found = activity(samples, end=T0 + 3.0, devices={1: UUID0, 0: UUID1.lower()})
    assert [(g.device, g.uuid, g.samples, g.sm_active_percent) for g in found.gpus] == [
        (0, UUID1.lower(), 3, 3.0),
        (1, UUID0, 3, 90.0),
    ]
    text = str(analyse(Trace().trace(0.0, 3e6), activity=found))
    assert "cuda:0 activity" in text and "cuda:1 activity" in text


def test_the_gpus_of_a_trace_are_those_its_kernels_ran_on():
    t = Trace()
    t.launch(0.0, "k", 2.0)
    t.launch(10.0, "k", 2.0, device=2)
    assert trace_devices(t.trace(0.0, 20.0)) == {0, 2}
    assert trace_devices({"traceEvents": [{"cat": "cpu_op", "args": {"device": 5}}, "x"]}) == set()


# -- the hint -----------------------------------------------------------------------------------------


def figures(utilisation: float | None, sm: float, samples: int = 3) -> CellActivity:
    one = GpuActivity(0, UUID0, samples, utilisation, sm, 1.0, 0.0, {"HMMA": 0.0})
    return CellActivity(interval=1.0, window=4.0, gpus=(one,))


@pytest.mark.parametrize(
    ("utilisation", "sm", "fires"),
    [
        (99.0, 0.4, True),
        (BUSY_UTILISATION, IDLE_SM - 0.1, True),
        (BUSY_UTILISATION - 0.1, 0.4, False),  # not busy: idle time is the other hints' business
        (99.0, IDLE_SM, False),  # the SMs did real work
        (None, 0.4, False),  # no utilisation figure: nothing to contradict
    ],
)
def test_busy_by_utilisation_with_idle_sms_is_a_hint(utilisation, sm, fires):
    hints = activity_hints([], figures(utilisation, sm))
    assert [h.title for h in hints] == ([STARVED] if fires else [])


def test_the_hint_gives_its_figures_and_the_fixes():
    (hint,) = activity_hints([], figures(99.0, 0.4))
    assert hint.evidence.startswith(
        "cuda:0: NVML's utilisation 99% but SM active 0.4% (the server's samples of the whole GPU, 3 × 1 s)"
    )
    assert all(fix in hint.fix for fix in ("larger batches", "torch.compile", "CUDA graphs", "streams"))


def test_a_launch_bound_trace_gets_one_hint_with_the_servers_evidence():
    launch_bound = Hint(LAUNCH_BOUND, "2,000 kernels, median 2.00 µs each", "fuse them")
    other = Hint("host syncs inside the loop", "50 syncs", "read rarely")
    hints = activity_hints([launch_bound, other], figures(99.0, 0.4))
    assert [h.title for h in hints] == [LAUNCH_BOUND, "host syncs inside the loop"]
    assert hints[0].evidence.startswith("2,000 kernels") and "SM active 0.4%" in hints[0].evidence
    assert hints[1] == other


def test_the_profile_of_a_launch_bound_loop_folds_the_figures_into_the_traces_hint():
    profile = analyse(tiny_ops_loop(), activity=figures(97.0, 1.5))
    assert [h.title for h in profile.hints] == [LAUNCH_BOUND]
    assert "NVML's utilisation 97% but SM active 1.5%" in profile.hints[0].evidence


def test_no_activity_leaves_the_hints_as_they_were():
    assert activity_hints([], None) == []
    assert activity_hints([], CellActivity(interval=1.0, window=0.5, gpus=())) == []


# -- the report -----------------------------------------------------------------------------------


def test_the_report_shows_each_gpus_line_and_the_hint_in_text_and_html():
    samples = [at(T0 + k, gpu(tensor_imma_active_percent=2.0)) for k in (1, 2, 3)]
    profile = analyse(Trace().trace(0.0, 3e6), activity=activity(samples, end=T0 + 3.0))
    text, html = str(profile), profile.as_report().html()
    line = (
        "while the cell ran (the server's samples of the whole GPU, 3 × 1 s): utilisation 99%, "
        "SM active 0.4% (occupancy 0.1%), tensor cores 0.0% (HMMA 0.0%, IMMA 2.0%)"
    )
    assert any(row.split()[:2] == ["cuda:0", "activity"] and row.endswith(line) for row in text.splitlines())
    assert f"[WARN] {STARVED}:" in text and "fix: give each kernel more work" in text
    assert line.replace("'", "&#x27;") in html and "WARN" in html
    assert profile.activity is not None and profile.activity.gpus[0].sm_active_percent == pytest.approx(0.4)


def test_without_a_server_the_report_is_as_before():
    t = Trace()
    t.launch(0.0, "k", 2.0)
    profile = analyse(t.trace(0.0, 3e6))
    assert (
        profile.activity is None and "SM active" not in str(profile) and "cuda:0 activity" not in str(profile)
    )
