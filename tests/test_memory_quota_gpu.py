"""On a real GPU (issue #28): the per-kernel quota is PyTorch's own limit, so a cell over it gets
PyTorch's out-of-memory error with the quota explained, while one within it works; and memory
PyTorch's limit does not see (two child processes of the kernel, each within its own fraction)
is caught by the server's NVML watch and gets the configured action."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support.browser import LabServer
from support.kernel_client import run

pytestmark = pytest.mark.gpu

GIB = 2**30
CHILD = (
    "import subprocess, sys\n"
    "code = \"import torch, time; x = torch.empty(3 * 2**30, dtype=torch.uint8, device='cuda'); "
    "print('ready', flush=True); time.sleep(300)\"\n"
    "children = [subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True) for _ in range(2)]\n"
    "assert all(c.stdout.readline().strip() == 'ready' for c in children)"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    lab = LabServer(
        tmp_path_factory.mktemp("quota"),
        app="jupyter_server",
        gpu={
            "backend": "nvml",
            "interval": 0.5,
            "kernel_memory_limit": 4 * GIB,
            "over_limit_grace": 2.0,
            "over_limit_action": "interrupt",
        },
    )
    yield lab
    lab.stop()


def test_a_cell_over_the_quota_gets_pytorchs_error_with_the_quota_explained(server: LabServer) -> None:
    kernel_id = server.start_notebook_kernel("quota.ipynb")
    client = server.kernel_client(kernel_id)
    try:
        over = run(
            client,
            "%load_ext jupyter_gpu\nimport torch\nx = torch.empty(6 * 2**30, dtype=torch.uint8, device='cuda')",
        )
        assert not over.ok and "OutOfMemoryError" in over.traceback
        assert "That is the quota of this server's kernels: 4.00 GiB each on a GPU" in over.stream(), (
            over.stream()
        )
        within = run(client, "x = torch.empty(3 * 2**30, dtype=torch.uint8, device='cuda'); print(x.numel())")
        assert within.ok and within.stream().strip() == str(3 * GIB)
    finally:
        client.stop_channels()


def test_children_over_the_quota_together_are_caught_by_the_nvml_watch(server: LabServer) -> None:
    kernel_id = server.start_notebook_kernel("children.ipynb")
    client = server.kernel_client(kernel_id)
    try:
        started = run(client, CHILD)  # 2 × 3 GiB: each within its 4 GiB, 6 GiB together
        assert started.ok, started.traceback
        began = time.monotonic()
        cell = run(
            client,
            "import time\ntry:\n    time.sleep(120)\nexcept KeyboardInterrupt:\n    print('interrupted')",
        )
        assert cell.stream().strip() == "interrupted"  # by the server's watch, not by the test
        assert time.monotonic() - began < 60
        (kernel,) = [k for k in server.api("GET", "api/gpu/kernels")["kernels"] if k["id"] == kernel_id]
        assert sum(r["used_memory_bytes"] for r in kernel["gpu_memory"]) > 4 * GIB
    finally:
        run(client, "for c in children: c.kill()")
        client.stop_channels()
