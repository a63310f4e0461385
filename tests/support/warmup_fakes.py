"""A stand-in for the few ``torch`` calls the warm-up makes, so that its timing, failures and
pacing can be tested with injected steps on a machine without a GPU."""

from __future__ import annotations

import contextlib
import types


def fake_cuda(count: int = 2, current: int = 0) -> types.SimpleNamespace:
    cuda = types.SimpleNamespace(
        device_count=lambda: count,
        current_device=lambda: current,
        is_initialized=lambda: True,
        device=lambda index: contextlib.nullcontext(),
        synchronize=lambda index=None: None,
        get_device_name=lambda index: "Fake GPU",
        memory_reserved=lambda index: 64 << 20,
        get_device_properties=lambda index: types.SimpleNamespace(),  # no uuid: NVML figure left out
        get_rng_state=lambda index: None,
        set_rng_state=lambda state, index: None,
    )
    return types.SimpleNamespace(cuda=cuda, get_rng_state=lambda: None, set_rng_state=lambda state: None)
