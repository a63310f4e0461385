"""``%gpu_mem`` and the out-of-memory explanation in a container, where NVML numbers processes
of the host's PID namespace: once this kernel's agent has matched its NVML process, that process
is this kernel's share, and the others are named by the notebooks the server attributes them to.
CPU, through a fake torch and simulated NVML."""

from __future__ import annotations

import re

import pytest
from IPython.utils.capture import capture_output
from support.fake_torch import OOM_TEXT, FakeCuda, install
from support.ipython_shell import shell_with

from jupyter_gpu.kernel import agent, gpu_memory, memory_magic, oom

GiB = 1024**3
MINE, THEIRS = 4_000_001, 4_000_002  # the host's PIDs of this kernel and another notebook's


@pytest.fixture
def ip():
    yield from shell_with(memory_magic.register, oom.register)


@pytest.fixture
def in_container(nvml, monkeypatch, tmp_path):
    """NVML lists two host PIDs; the server says THEIRS is notebook other.ipynb's."""
    nvml.readings["devices"][0]["compute_processes"] = [
        {"pid": MINE, "used_gpu_memory": 3 * GiB},
        {"pid": THEIRS, "used_gpu_memory": 100 * GiB},
    ]
    monkeypatch.setattr(gpu_memory, "server_labels", lambda uuid: {THEIRS: "notebook other.ipynb"})
    install(monkeypatch, FakeCuda())
    return nvml


def matched_agent(monkeypatch, tmp_path, nvml_pid: int) -> None:
    """This kernel's agent, having seen ``nvml_pid`` appear alone with its context."""
    running = agent.KernelAgent(tmp_path, "k-mine")
    running._nvml.identity.before_context({THEIRS})
    running._nvml.identity.observe({THEIRS: 100 * GiB, nvml_pid: 3 * GiB}, 2 * GiB)
    assert running.nvml_pid == nvml_pid
    monkeypatch.setattr(agent, "_running", running)


def gpu_mem(ip) -> str:
    with capture_output() as captured:
        ip.run_line_magic("gpu_mem", "")
    return captured.outputs[0].data["text/plain"]


def oom_explanation(ip) -> str:
    with capture_output() as captured:
        ip.run_cell(f"import torch\nraise torch.OutOfMemoryError({OOM_TEXT!r})")
    out = captured.stdout
    return out[out.index("jupyter_gpu: why CUDA ran out of memory") :]


def test_before_the_match_nothing_is_guessed(ip, in_container) -> None:
    text = gpu_mem(ip)
    assert re.search(r"this kernel +n/a  NVML reports process IDs of another PID namespace", text)
    assert f"pid {MINE} (not visible from here" in text


def test_once_matched_the_kernel_has_its_share_and_the_other_notebook_is_named(
    ip, in_container, monkeypatch, tmp_path
) -> None:
    matched_agent(monkeypatch, tmp_path, MINE)
    text = gpu_mem(ip)
    assert re.search(r"this kernel +3.00 GiB  2.49 GiB PyTorch cache \+ 526 MiB outside it", text)
    assert "100 GiB  notebook other.ipynb" in text
    assert f"pid {MINE}" not in text  # not one of the "others"

    explanation = oom_explanation(ip)
    assert "Other processes hold 100 GiB of this GPU:" in explanation
    assert "100 GiB  notebook other.ipynb" in explanation
    assert f"pid {MINE}" not in explanation
