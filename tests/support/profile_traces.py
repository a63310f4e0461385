"""Synthetic ``torch.profiler`` traces: the Chrome trace torch exports with CUDA activities
(kineto's categories: cpu_op, cuda_runtime, kernel, gpu_memcpy; kernels linked to their launch
by ``correlation``), built event by event so that a test can plant one problem in it."""

from __future__ import annotations

import itertools
from typing import Any

from jupyter_gpu.analysis.profile_trace import CELL_MARK

H200 = [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0}]
BF16 = "c10::BFloat16"


class Trace:
    """A synthetic kineto trace: a cell on one thread launching kernels onto one stream."""

    def __init__(self, record_shapes: bool = True, profile_memory: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.ids = itertools.count(1)
        self.gpu_free = 0.0  # when the stream's last kernel ends

    def op(self, name: str, ts: float, dur: float, types: list[str] | None = None, dims: list | None = None):
        args: dict[str, Any] = {}
        if self.record_shapes and types is not None:
            args = {"Input type": types, "Input Dims": dims or [[] for _ in types]}
        self.events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}
        )

    def annotation(self, name: str, ts: float, dur: float) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": dur,
                "args": {},
            }
        )

    def launch(self, ts: float, kernel: str, dur: float, cat: str = "kernel", **args: Any) -> float:
        """A cudaLaunchKernel at ``ts`` (5 µs) and its kernel, queued after the previous one."""
        corr = next(self.ids)
        runtime = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": runtime,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 5.0,
                "args": {"correlation": corr},
            }
        )
        start = max(ts + 5.0, self.gpu_free)
        self.gpu_free = start + dur
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": start,
                "dur": dur,
                "args": {"correlation": corr, "device": 0, "stream": 7, **args},
            }
        )
        return ts + 5.0

    def sync(self, ts: float, name: str = "cudaStreamSynchronize") -> float:
        end = max(ts, self.gpu_free)
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": end - ts,
                "args": {},
            }
        )
        return end

    def matmul(
        self, ts: float, kernel_us: float, dtype: str = BF16, dims: tuple[int, int, int] = (4096, 4096, 4096)
    ):
        """aten::mm of [m, k] x [k, n], one cuBLAS kernel; returns when the CPU is done."""
        m, k, n = dims
        self.op("aten::mm", ts, 8.0, [dtype, dtype], [[m, k], [k, n]])
        self.launch(ts + 2.0, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", kernel_us)
        return ts + 8.0

    def trace(self, start: float, end: float) -> dict[str, Any]:
        mark = {"ph": "X", "cat": "user_annotation", "name": CELL_MARK, "pid": 1, "tid": 1, "ts": start}
        return {
            "traceEvents": [{**mark, "dur": end - start, "args": {}}, *self.events],
            "deviceProperties": H200,
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
        }


def tiny_ops_loop() -> dict[str, Any]:
    """2,000 elementwise adds of 8 values, launched one after another: a launch-bound loop (the
    GPU busy 2 µs of every 12)."""
    t = Trace()
    ts = 0.0
    for _ in range(2000):
        t.op("aten::add", ts, 12.0, [BF16], [[8]])
        t.launch(ts + 3.0, "vectorized_elementwise_kernel", 2.0)
        ts += 12.0
    return t.trace(0.0, ts)
