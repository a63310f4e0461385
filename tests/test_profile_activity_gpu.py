"""On a GPU with performance monitoring (Hopper and later; run on the H200 machine): a real
jupyter_server reading NVML, a real kernel of it running CUDA, and ``%%gpu_profile`` saying what
the GPU really did. A CUDA graph of tiny adds keeps NVML's utilisation near 100% with the SMs
nearly idle (and gets the hint); a bf16 matmul loop keeps the tensor cores busy (and gets none).

Each profiled loop runs for about 3 s: until the server has stamped five samples that began after
the loop did (a poll with a deadline), so that NVML's utilisation, which it averages over up to a
second of its own, reads the loop alone. The loop keeps at most two steps queued (an event per
step): a backlog of queued launches would run on after the loop, while the cell waits for it.
"""

from __future__ import annotations

import re

import pytest
from support.jupyter_api import notebook
from support.waiting import wait_for

pytestmark = pytest.mark.gpu

INTERVAL = 0.5
SAMPLES = 5
STARVED = "busy by NVML's utilisation, but the SMs are mostly idle"
LINE = re.compile(
    r"cuda:0 activity +while the cell ran \(the server's samples of the whole GPU, (\d+) × 0.5 s\): "
    r"utilisation (\d+)%, SM active ([\d.]+)% \(occupancy [\d.]+%\), tensor cores ([\d.]+)% \(HMMA ([\d.]+)%"
)
SETUP = """
import time
import torch
from jupyter_gpu.client import discover
_server = discover()[0]

def _for_samples(step):
    '''Run ``step`` until the server stamped {samples} samples that began after the first step,
    with at most two steps queued on the GPU.'''
    began = time.time()
    queued = []
    next_poll = began
    while True:
        step()
        queued.append(torch.cuda.Event())
        queued[-1].record()
        if len(queued) > 2:
            queued.pop(0).synchronize()
        if time.time() >= next_poll:
            next_poll = time.time() + 0.05
            since = 'api/gpu/telemetry?since=%f' % (began + {interval})
            if len(_server.get(since)['history']) >= {samples}:
                return
            assert time.time() < began + 60, 'the server stamped no samples'

x = torch.zeros(1, device='cuda')
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        x.add_(1.0)  # warm-up on a side stream, as capture wants
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    for _ in range(2000):
        x.add_(1.0)
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
graph.replay()
c = a @ a
torch.cuda.synchronize()
print('ready')
""".replace("{interval}", str(INTERVAL)).replace("{samples}", str(SAMPLES))


@pytest.fixture
def gpu_monitor_config() -> dict:
    return {"backend": "nvml", "interval": INTERVAL, "slow_interval": 1.0}


def profiled(cell) -> tuple[str, re.Match]:
    """The report's text and its activity line for cuda:0."""
    (shown,) = [m["content"]["data"]["text/plain"] for m in cell.messages if m["msg_type"] == "display_data"]
    line = LINE.search(shown)
    assert line is not None, shown
    return shown, line


async def test_a_graph_of_tiny_kernels_is_busy_but_idle_and_a_bf16_matmul_uses_the_tensor_cores(
    jp_fetch, jp_serverapp, kernel_env, gpu_monitor, tmp_path
):
    async def sampling():
        return gpu_monitor.sampler.status.available and gpu_monitor.sampler.latest()

    await wait_for(sampling, timeout=15)
    async with notebook(jp_fetch, jp_serverapp) as (_, cells):
        setup = await cells.run(SETUP)
        assert setup.stream().strip() == "ready", setup.traceback

        tiny = await cells.run(f"%%gpu_profile --trace {tmp_path}\n_for_samples(graph.replay)")
        assert tiny.ok, tiny.traceback
        text, line = profiled(tiny)
        print(text)
        samples, utilisation, sm_active = int(line[1]), int(line[2]), float(line[3])
        assert samples >= SAMPLES and utilisation >= 90 and sm_active < 20, line[0]
        assert f"[WARN] {STARVED}" in text

        matmul = await cells.run(f"%%gpu_profile --trace {tmp_path}\n_for_samples(lambda: a @ a)")
        assert matmul.ok, matmul.traceback
        text, line = profiled(matmul)
        print(text)
        tensor, hmma = float(line[4]), float(line[5])
        assert int(line[1]) >= SAMPLES and tensor > 50 and hmma > 50, line[0]
        assert STARVED not in text
