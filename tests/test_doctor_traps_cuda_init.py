"""Issue #21: the doctor and the other diagnostic magics never initialise CUDA where they run:
torch's build facts leave cuDNN's version to the child, and in a real kernel on a GPU machine no
diagnostic magic leaves torch.cuda.is_initialized() True."""

from __future__ import annotations

import json

import pytest
from support.doctor_cli import ENV
from support.kernel_client import run

# -- build facts never initialise CUDA ------------------------------------------------------------


def test_build_facts_leave_cudnn_version_to_the_child(monkeypatch):
    """torch.backends.cudnn.version() asks every device's capability (torch.cuda._lazy_init):
    read in the kernel by %gpu_doctor, it initialised CUDA there on the H200."""
    torch = pytest.importorskip("torch")
    from jupyter_gpu.doctor import probe

    asked = []
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: asked.append("cudnn.version"))
    facts = probe.build_facts(torch)
    assert asked == [] and "cudnn_version" not in facts
    assert facts["sharing_strategy"] == torch.multiprocessing.get_sharing_strategy()


# -- a real kernel: no diagnostic magic initialises CUDA ------------------------------------------


@pytest.mark.gpu
def test_no_diagnostic_magic_initialises_cuda_in_the_kernel():
    """On the H200, %gpu_doctor left torch.cuda.is_initialized() True (cuDNN's version check)."""
    from jupyter_client.manager import start_new_kernel

    env = {**ENV, "JUPYTER_GPU_DDP_PRESTART": "0"}
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    try:
        assert run(client, "%load_ext jupyter_gpu\nimport torch", timeout=180).ok
        for magic in (
            "%gpu_doctor",
            "%gpu_doctor --json",
            "%gpu_doctor --no-server --workers 4 --batch-mib 8",
            "%gpu_mem",
            "%gpu_monitor --interval 0.2",
            "%gpu_monitor --stop",
        ):
            cell = run(client, magic, timeout=180)
            assert cell.ok, (magic, cell.reply)
            initialised = run(client, "print(torch.cuda.is_initialized())", timeout=180).stream()
            assert initialised.strip() == "False", magic
        doctor = json.loads(run(client, "%gpu_doctor --json --no-server", timeout=180).stream())
        assert doctor["cuda_ready"] is True
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
