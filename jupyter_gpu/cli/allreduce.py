"""An all-reduce across every GPU, started the way real jobs start: torch.distributed elastic.

One rank per GPU, spawned (never forked) by ``elastic_launch`` with a c10d rendezvous on port 0
(no fixed port to collide with a student's job). Each rank checks the sum once, then times a
loop of all-reduces of the same buffer; the slowest rank's time is the collective's time.
Bandwidths follow nccl-tests: algorithm bandwidth = bytes / time; bus bandwidth = algorithm
bandwidth x 2(n-1)/n, the traffic each link carries, comparable across GPU counts.
"""
from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record


@dataclass
class AllReduceResult:
    ok: bool
    error: str | None
    backend: str
    world_size: int
    size_bytes: int
    iterations: int
    nccl_version: str | None = None
    seconds: float | None = None  # one all-reduce, slowest rank
    algorithm_bandwidth_gbps: float | None = None
    bus_bandwidth_gbps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@record
def rank_main(backend: str, size_bytes: int, iterations: int, warmup: int, timeout_s: float) -> dict[str, Any]:
    """One rank (elastic's entry point, so module level): check the sum, then time the loop."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        x = torch.full((size_bytes // 4,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(x)
        expected = world * (world + 1) / 2
        correct = bool(torch.all(x == expected).item())
        x.zero_()
        for _ in range(warmup):
            dist.all_reduce(x)
        _synchronize(torch, device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(x)
        _synchronize(torch, device)
        seconds = (time.perf_counter() - start) / iterations
        nccl = None
        if backend == "nccl":
            version = torch.cuda.nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        return {"rank": rank, "correct": correct, "seconds": seconds, "nccl_version": nccl}
    finally:
        dist.destroy_process_group()


def _synchronize(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _failure_message(error: Exception) -> str:
    """The failing rank's own exception line, from the error file ``@record`` wrote."""
    first = getattr(error, "get_first_failure", None)
    if first is None:
        return f"{type(error).__name__}: {error}"
    rank, failure = first()
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    line = str(message).strip().splitlines()[0] if str(message).strip() else f"exit code {failure.exitcode}"
    return f"rank {rank} failed: {line}"


def measure(nproc: int, *, backend: str = "nccl", size_bytes: int = 256 * 2**20, iterations: int = 20,
            warmup: int = 5, timeout_s: float = 120.0) -> AllReduceResult:
    """Launch ``nproc`` ranks on this machine and all-reduce ``size_bytes`` of float32 on each."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    result = AllReduceResult(False, None, backend, nproc, size_bytes, iterations)
    # elastic logs every failure and teardown itself; this command reports them once, shorter.
    for name in ("torch.distributed.elastic", "torch.multiprocessing"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="jupyter_gpu-preflight-") as logs:
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nproc,
            # The rendezvous key in the TCPStore, which listens on every interface without auth,
            # and whose value torch unpickles: 128 random bits, so that nobody can guess it.
            run_id=f"jupyter_gpu-preflight-{uuid.uuid4().hex}",
            rdzv_backend="c10d",
            rdzv_endpoint="localhost:0",
            rdzv_configs={"timeout": int(timeout_s)},
            max_restarts=0,
            monitor_interval=0.1,
            start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=logs, redirects=Std.ALL),
        )
        # Spawned ranks start with the working directory first on sys.path: started in a
        # directory another user can write (/tmp, a shared course folder), a planted
        # multiprocessing/ would run as us. They start in this private directory instead.
        caller = os.getcwd()
        os.chdir(logs)
        try:
            ranks = elastic_launch(config, rank_main)(backend, size_bytes, iterations, warmup, timeout_s)
        except Exception as error:  # ChildFailedError, or a rendezvous that never completed
            result.error = _failure_message(error)
            return result
        finally:
            os.chdir(caller)
    wrong = sorted(r["rank"] for r in ranks.values() if not r["correct"])
    if wrong:
        result.error = f"wrong sum on rank(s) {', '.join(map(str, wrong))}: the GPUs or their links corrupt data"
        return result
    result.seconds = max(r["seconds"] for r in ranks.values())
    result.nccl_version = ranks[0]["nccl_version"]
    result.algorithm_bandwidth_gbps = size_bytes / result.seconds / 1e9
    result.bus_bandwidth_gbps = result.algorithm_bandwidth_gbps * 2 * (nproc - 1) / nproc
    result.ok = True
    return result
