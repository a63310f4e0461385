"""``%gpu_mem`` and the out-of-memory explanation, on CPU through a fake torch and simulated NVML;
the ``gpu`` tests compare with torch, nvidia-smi and a real OOM on an NVIDIA machine."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output
from support.fake_torch import OOM_TEXT, UUID0, FakeCuda, install
from support.ipython_shell import shared_shell, shell_with
from support.workloads import fragment

from jupyter_gpu import client
from jupyter_gpu.kernel import gpu_memory, memory_magic, oom
from jupyter_gpu.nvml.simulated import SimulatedNVML

GiB = 1024**3


@pytest.fixture
def ip():
    yield from shell_with(memory_magic.register, oom.register)


def _gpu_mem(ip, line: str = "") -> dict:
    with capture_output() as captured:
        ip.run_line_magic("gpu_mem", line)
    (output,) = captured.outputs
    return output.data


def test_without_cuda(ip, nvml, monkeypatch) -> None:
    install(monkeypatch, FakeCuda(initialized=False))
    data = _gpu_mem(ip)
    text = data["text/plain"]
    assert "has not initialised CUDA" in text and "torch is imported" in text
    assert "GPU 0" in text and "GPU 1" in text and "NVIDIA H200" in text
    assert "has not initialised CUDA" in data["text/html"]


def test_without_nvml(ip, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    sim = SimulatedNVML({"init_error": "NVML_ERROR_LIBRARY_NOT_FOUND"})
    monkeypatch.setattr(gpu_memory, "nvml_backend", lambda: sim)
    text = _gpu_mem(ip)["text/plain"]
    assert "torch is not imported" in text and "No NVIDIA driver found" in text


def test_report(ip, nvml, monkeypatch, other_process) -> None:
    cuda = FakeCuda()
    install(monkeypatch, cuda)
    text = _gpu_mem(ip)["text/plain"]
    assert f"GPU 0: NVIDIA H200 (GPU-{UUID0})" in text
    # NVML: whole GPU, this kernel split into cache and the rest, the other process by command.
    assert "3.00 GiB  used of 140 GiB" in text
    assert "2.99 GiB  2.49 GiB PyTorch cache + 518 MiB outside it" in text
    assert "100 GiB  1 process(es)" in text
    assert f"pid {other_process.pid}: {sys.executable} -c import time" in text

    # Allocator, from the fixture.
    assert "1.17 GiB  in live tensors (1.15 GiB requested, 19.8 MiB rounding waste)" in text
    assert "381 MiB  fragmentation 15.0% of reserved" in text
    assert "964 MiB  empty_cache() would return it" in text
    assert "22.0 MiB  large pool; small pool 1.08 MiB; 144 segments" in text
    # Advice: expandable segments, empty_cache, and the process holding most of the GPU.
    assert "expandable_segments:True" in text
    assert "torch.cuda.empty_cache() would return 964 MiB" in text
    assert "Other processes hold 100 GiB" in text
    assert cuda.calls["mem_get_info"] == 0  # NVML answers; no extra CUDA calls


def test_children_count_as_this_kernel(ip, nvml, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        nvml.readings["devices"][0]["compute_processes"] = [
            {"pid": os.getpid(), "used_gpu_memory": 3_212_836_864},
            {"pid": child.pid, "used_gpu_memory": 1 * GiB},
        ]
        text = _gpu_mem(ip)["text/plain"]
    finally:
        child.kill()
        child.wait()
    assert "3.99 GiB  2.49 GiB PyTorch cache + 1.51 GiB outside it" in text
    assert re.search(r"other processes +none", text)


def test_pids_of_another_namespace_are_not_guessed(ip, nvml, monkeypatch) -> None:
    """In a container NVML reports host PIDs: neither this kernel's share nor others' owners."""
    install(monkeypatch, FakeCuda())
    nvml.readings["devices"][0]["compute_processes"] = [{"pid": 4_000_000, "used_gpu_memory": 3 * GiB}]
    text = _gpu_mem(ip)["text/plain"]
    assert re.search(r"this kernel +n/a  NVML reports process IDs of another PID namespace", text)
    assert "pid 4000000 (not visible from here" in text


def test_snapshot_map(ip, nvml, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())
    data = _gpu_mem(ip, "--snapshot")
    svg = data["text/html"][data["text/html"].index("<svg") :]
    assert svg.count("<rect") > 400
    assert "large pool: 143 segments" in svg and "small pool: 1 segment," in svg
    assert "free, stranded (fragmentation) 381 MiB" in svg
    assert "<svg" not in _gpu_mem(ip)["text/html"]


def test_device_option(ip, nvml, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())
    text = _gpu_mem(ip, "--device 1")["text/plain"]
    assert "GPU 1: NVIDIA H200" in text and "0 B  in live tensors" in text
    with pytest.raises(UsageError, match="devices 0 to 1"):
        ip.run_line_magic("gpu_mem", "--device 2")


def test_expandable_configured_silences_that_advice(ip, nvml, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert "expandable_segments:True" not in _gpu_mem(ip)["text/plain"]


def test_unregister(monkeypatch) -> None:
    shell = shared_shell()
    before = len(shell.events.callbacks["post_run_cell"])
    undo = [memory_magic.register(shell), oom.register(shell)]
    assert "gpu_mem" in shell.magics_manager.magics["line"]
    for remove in undo:
        remove()
    assert "gpu_mem" not in shell.magics_manager.magics["line"]
    assert len(shell.events.callbacks["post_run_cell"]) == before


# -- the out-of-memory explanation --------------------------------------------------------


def _run(ip, code: str) -> str:
    with capture_output() as captured:
        ip.run_cell(code)
    return captured.stdout


def test_oom_explained_under_the_traceback(ip, nvml, monkeypatch, other_process) -> None:
    install(monkeypatch, FakeCuda())
    out = _run(ip, f"import torch\nraise torch.OutOfMemoryError({OOM_TEXT!r})")
    traceback_at = out.index("OutOfMemoryError: CUDA out of memory")
    explanation_at = out.index("jupyter_gpu: why CUDA ran out of memory on GPU 0")
    assert traceback_at < explanation_at
    explanation = out[explanation_at:]
    assert "Asked for 2.00 GiB; the GPU had 1.00 GiB free of 140 GiB." in explanation
    assert (
        "1.17 GiB in live tensors, 1.31 GiB cached but unallocated, of which 381 MiB is stranded, fragmentation 15%"
        in explanation
    )
    assert "Other processes hold 100 GiB of this GPU:" in explanation
    assert f"pid {other_process.pid}:" in explanation
    assert "expandable_segments:True" in explanation


def test_oom_with_the_real_torch_class() -> None:
    torch = pytest.importorskip("torch")
    shell = shared_shell()
    undo = oom.register(shell)
    try:
        out = _run(shell, f"import torch\nraise torch.OutOfMemoryError({OOM_TEXT!r})")
    finally:
        undo()
    assert "OutOfMemoryError: CUDA out of memory" in out
    assert "Asked for 2.00 GiB; the GPU had 1.00 GiB free" in out
    if not torch.cuda.is_initialized():  # CPU torch: no allocator to report, and none initialised
        assert "This kernel:" not in out


@pytest.mark.parametrize(
    "code",
    [
        "raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')",
        "raise MemoryError()",
        "1 + 1",
    ],
)
def test_other_errors_are_left_alone(ip, code: str) -> None:
    assert "jupyter_gpu" not in _run(ip, code)


def test_non_cuda_oom_is_left_alone(ip, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())
    assert "jupyter_gpu" not in _run(
        ip, "import torch\nraise torch.OutOfMemoryError('MPS backend out of memory')"
    )


def test_failing_explanation_does_not_raise(ip, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())

    def broken(*args, **kwargs):
        raise RuntimeError("allocator gone")

    monkeypatch.setattr(gpu_memory, "allocator_view", broken)
    out = _run(ip, f"import torch\nraise torch.OutOfMemoryError({OOM_TEXT!r})")
    assert "OutOfMemoryError: CUDA out of memory" in out
    assert "could not explain this out-of-memory error: allocator gone" in out


# -- naming other kernels through the Jupyter server ---------------------------------------


@pytest.fixture
def jupyter_server(tmp_path, monkeypatch, other_process):
    """A stand-in for this kernel's server: a jpserver file and /api/gpu/kernels."""
    seen: list[str | None] = []
    body = json.dumps(
        {
            "kernels": [
                {
                    "id": "k-other",
                    "path": "work/train.ipynb",
                    "gpu_memory": [
                        {
                            "gpu_index": 0,
                            "uuid": f"GPU-{UUID0}",
                            "used_memory_bytes": 100 * GiB,
                            "pids": [other_process.pid],
                        }
                    ],
                },
                {
                    "id": "k-elsewhere",
                    "path": "b.ipynb",
                    "gpu_memory": [
                        {"gpu_index": 1, "uuid": "GPU-another", "used_memory_bytes": 1, "pids": [1]}
                    ],
                },
            ],
            "unattributed": [],
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            ok = self.path == "/base/api/gpu/kernels"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(body if ok else b"{}")

        def log_message(self, *args) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    (tmp_path / f"jpserver-{os.getpid()}.json").write_text(
        json.dumps(  # this process listens
            {"url": f"http://127.0.0.1:{httpd.server_port}/base/", "token": "secret", "pid": os.getpid()}
        )
    )
    monkeypatch.setattr(client, "connection_file", lambda: str(tmp_path / "kernel-mine.json"))
    yield seen
    httpd.shutdown()


def test_other_kernels_named_by_notebook(ip, nvml, monkeypatch, jupyter_server) -> None:
    install(monkeypatch, FakeCuda())
    out = _run(ip, f"import torch\nraise torch.OutOfMemoryError({OOM_TEXT!r})")
    assert "100 GiB  notebook work/train.ipynb" in out
    assert jupyter_server == ["token secret"]
    assert "100 GiB  notebook work/train.ipynb" in _gpu_mem(ip)["text/plain"]


def test_a_server_that_never_answers_costs_only_the_timeout(tmp_path, monkeypatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never replies
        (tmp_path / f"jpserver-{os.getpid()}.json").write_text(
            json.dumps(
                {"url": f"http://127.0.0.1:{silent.getsockname()[1]}/", "token": "", "pid": os.getpid()}
            )
        )
        monkeypatch.setattr(client, "connection_file", lambda: str(tmp_path / "kernel-mine.json"))
        started = time.monotonic()
        assert gpu_memory.server_labels(f"GPU-{UUID0}") == {}
        assert time.monotonic() - started < gpu_memory.SERVER_TIMEOUT + 1


def test_no_server_no_labels(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(client, "connection_file", lambda: None)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    assert gpu_memory.server_labels(f"GPU-{UUID0}") == {}


# -- on a real GPU ------------------------------------------------------------------------


def _cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


@pytest.mark.gpu
def test_gpu_agent_figures_match_memory_stats(tmp_path) -> None:
    from jupyter_gpu.kernel.agent import KernelAgent

    torch = _cuda_torch()
    keep = fragment(torch)
    torch.cuda.synchronize()
    agent = KernelAgent(tmp_path / "f.json", "k")
    doc = agent.figures()
    stats = torch.cuda.memory_stats(0)
    (device,) = [d for d in doc["devices"] if d["index"] == 0]
    assert device["allocated_bytes"] == stats["allocated_bytes.all.current"]
    assert device["reserved_bytes"] == stats["reserved_bytes.all.current"]
    assert device["inactive_split_bytes"] == stats["inactive_split_bytes.all.current"] > 0
    assert device["segments"] == stats["segment.all.current"]
    assert device["uuid"] == f"GPU-{torch.cuda.get_device_properties(0).uuid}"
    del keep


@pytest.mark.gpu
def test_gpu_nvml_matches_nvidia_smi(ip) -> None:
    torch = _cuda_torch()
    x = torch.empty(1024**3, dtype=torch.uint8, device="cuda")
    uuid = f"GPU-{torch.cuda.get_device_properties(0).uuid}"
    view, reason = gpu_memory.device_view(uuid)
    assert view is not None, reason
    smi = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    mine = [line.split(", ") for line in smi.splitlines() if line.split(", ")[0] == str(os.getpid())]
    mib = sum(int(used) for pid, gpu, used in mine if gpu == uuid)
    assert abs(view.this_kernel_bytes / 1024**2 - mib) <= 1
    text = _gpu_mem(ip)["text/plain"]
    assert "PyTorch cache +" in text
    del x


@pytest.mark.gpu
def test_gpu_real_oom_names_the_other_process(ip) -> None:
    torch = _cuda_torch()
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    hog_code = (
        "import torch, time; x = torch.empty(8 * 1024**3, dtype=torch.uint8, device='cuda:0'); "
        "print('ready', flush=True); time.sleep(300)"
    )
    # Through a shell that exits at once: a child of this process would count as this kernel.
    shell = subprocess.Popen(
        ["sh", "-c", f'CUDA_VISIBLE_DEVICES={device} {sys.executable} -c "{hog_code}" & echo $!'],
        stdout=subprocess.PIPE,
        text=True,
    )
    hog = psutil.Process(int(shell.stdout.readline()))
    try:
        assert shell.stdout.readline().strip() == "ready"
        # memory cached by earlier tests in this process would let the request fit without an OOM
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(0)
        out = _run(
            ip, f"import torch\nx = torch.empty({free + 2 * 1024**3}, dtype=torch.uint8, device='cuda:0')"
        )
    finally:
        hog.kill()
        shell.wait()
    assert "OutOfMemoryError" in out and "jupyter_gpu: why CUDA ran out of memory on GPU 0" in out
    assert f"pid {hog.pid}:" in out and "Other processes hold" in out
