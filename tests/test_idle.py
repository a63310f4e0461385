"""The idle flag and the culler's decisions, as pure functions (jupyter_gpu/analysis/idle.py)."""

from __future__ import annotations

import pytest

from jupyter_gpu.analysis.idle import CullPolicy, cull_action, cull_in, idle_holding, idle_seconds

GIB = 1024**3


@pytest.mark.parametrize(
    ("state", "last", "expected"),
    [
        ("idle", 100.0, 50.0),
        ("starting", 100.0, 50.0),  # nobody has talked to it since it started
        ("busy", 100.0, None),  # a long cell is in use, however quiet
        ("restarting", 100.0, None),
        ("dead", 100.0, None),
        ("idle", None, None),
        ("idle", 200.0, 0.0),  # a clock step never makes a negative idle time
    ],
)
def test_only_an_idle_kernel_has_an_idle_time(state, last, expected):
    assert idle_seconds(state, last, now=150.0) == expected


@pytest.mark.parametrize(
    ("idle", "memory", "flagged"),
    [
        (900.0, GIB, True),
        (899.0, 40 * GIB, False),  # not idle long enough
        (3600.0, GIB - 1, False),  # too little memory
        (None, 40 * GIB, False),  # busy
    ],
)
def test_idle_holding_needs_both_the_time_and_the_memory(idle, memory, flagged):
    assert idle_holding(idle, memory, after=900.0, min_memory=GIB) is flagged


def test_a_zero_threshold_still_needs_some_memory_to_flag():
    assert idle_holding(10.0, 0, after=0.0, min_memory=0) is False
    assert idle_holding(10.0, 1, after=0.0, min_memory=0) is True


POLICY = CullPolicy(idle_after=1800.0, min_memory=GIB, warn_before=300.0, cull_connected=False)


def test_cull_in_counts_down_to_the_shutdown():
    assert cull_in(POLICY, 1000.0, 2 * GIB, 0) == 800.0
    assert cull_in(POLICY, 2000.0, 2 * GIB, 0) == 0.0


@pytest.mark.parametrize(
    ("policy", "idle", "memory", "connections"),
    [
        (CullPolicy(0.0, 0, 0.0, True), 10**6, 40 * GIB, 0),  # culler off
        (POLICY, None, 40 * GIB, 0),  # busy: never
        (POLICY, 10**6, GIB - 1, 0),  # too little memory
        (POLICY, 10**6, 40 * GIB, 1),  # a notebook tab is open
    ],
)
def test_the_culler_spares(policy, idle, memory, connections):
    assert cull_in(policy, idle, memory, connections) is None


def test_cull_connected_and_zero_min_memory_take_any_idle_kernel():
    anything = CullPolicy(idle_after=60.0, min_memory=0, warn_before=0.0, cull_connected=True)
    assert cull_in(anything, 61.0, 0, 3) == 0.0


@pytest.mark.parametrize(
    ("remaining", "warned", "action"),
    [
        (None, False, "keep"),
        (600.0, False, "keep"),
        (300.0, False, "warn"),
        (10.0, True, "keep"),  # warned once only
        (0.0, True, "cull"),
        (0.0, False, "cull"),  # came due between two checks: no time left to warn
    ],
)
def test_the_culler_warns_once_then_shuts_down(remaining, warned, action):
    assert cull_action(remaining, 300.0, warned) == action


def test_no_warning_when_warn_before_is_zero():
    assert cull_action(1.0, 0.0, False) == "keep"
