"""An all-reduce across every GPU, started the way real jobs start: torch.distributed elastic.

One rank per GPU, spawned (never forked) by the package's one launcher (``jupyter_gpu.ddp.gang``),
whose store listens on a loopback port of its own (no fixed port to collide with a student's
job). Each rank checks the sum once, then times a loop of all-reduces of the same buffer; the slowest rank's time is the collective's time.
Bandwidths follow nccl-tests: algorithm bandwidth = bytes / time; bus bandwidth = algorithm
bandwidth x 2(n-1)/n, the traffic each link carries, comparable across GPU counts.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from ..ddp.gang import Gang
from ..ddp.options import WorkerOptions


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
def rank_main(
    backend: str, size_bytes: int, iterations: int, warmup: int, timeout_s: float
) -> dict[str, Any]:
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


def measure(
    nproc: int,
    *,
    backend: str = "nccl",
    size_bytes: int = 256 * 2**20,
    iterations: int = 20,
    warmup: int = 5,
    timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
    nnodes: int = 1,
    node_rank: int | None = None,
    rdzv_endpoint: str | None = None,
) -> AllReduceResult:
    """Launch ``nproc`` ranks on this machine and all-reduce ``size_bytes`` of float32 on each.

    The ranks are started by the same launcher as ``%%ddp_launch`` (``Gang``): spawned, their
    store on loopback, nothing listening beyond this machine, unless ``rdzv_endpoint`` joins
    ``nnodes`` machines. ``env`` goes to every rank last: ``NCCL_SOCKET_IFNAME`` there replaces
    the launcher's loopback choice, to test the user's setting.
    """
    result = AllReduceResult(False, None, backend, nproc * nnodes, size_bytes, iterations)
    gang = Gang(
        WorkerOptions(
            nproc=nproc,
            backend=backend,
            start_method="spawn",
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint,
        ),
        rank_main,
        lambda gang: (backend, size_bytes, iterations, warmup, timeout_s),
        env=env,
        commands=False,
    )
    # Spawned ranks start with the working directory first on sys.path: started in a directory
    # another user can write (/tmp, a shared course folder), a planted multiprocessing/ would
    # run as us. They start in a private directory instead.
    caller = os.getcwd()
    try:
        with tempfile.TemporaryDirectory(prefix="jupyter_gpu-preflight-") as private:
            os.chdir(private)
            try:
                gang.start()
            except Exception as error:  # a rendezvous that fails or times out, between nodes
                result.error = f"the ranks did not start: {type(error).__name__}: {error}"
                return result
            finally:
                os.chdir(caller)
            death = gang.wait_for_exit(time.monotonic() + timeout_s)
    except TimeoutError:
        result.error = f"the all-reduce did not finish within {timeout_s:g} s"
        return result
    finally:
        gang.stop(clean=False)
    if death is not None:
        last = death.message.strip().splitlines()[-1:] or death.stderr_tail[-1:]
        result.error = death.describe() + (f": {last[0].strip()}" if last else "")
        return result
    ranks = gang.return_values
    wrong = sorted(r["rank"] for r in ranks.values() if not r["correct"])
    if wrong:
        result.error = (
            f"wrong sum on rank(s) {', '.join(map(str, wrong))}: the GPUs or their links corrupt data"
        )
        return result
    world = result.world_size
    result.seconds = max(r["seconds"] for r in ranks.values())
    result.nccl_version = ranks[min(ranks)]["nccl_version"]
    result.algorithm_bandwidth_gbps = size_bytes / result.seconds / 1e9
    result.bus_bandwidth_gbps = result.algorithm_bandwidth_gbps * 2 * (world - 1) / world
    result.ok = True
    return result
