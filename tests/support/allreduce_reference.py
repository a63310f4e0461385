"""The gpu test's reference for preflight's all-reduce: the same transfer, launched by torchrun
and timed with CUDA events on the GPU, not by preflight's launcher and wall clock.

Usage: python -m torch.distributed.run --standalone --nproc-per-node N tests/support/allreduce_reference.py BYTES ITERS
Rank 0 prints {"seconds": <one all-reduce, slowest rank>} as a JSON line.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

size_bytes, iterations = int(sys.argv[1]), int(sys.argv[2])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
x = torch.zeros(size_bytes // 4, device="cuda")
for _ in range(5):
    dist.all_reduce(x)
torch.cuda.synchronize()
dist.barrier()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(iterations):
    dist.all_reduce(x)
end.record()
torch.cuda.synchronize()
seconds = torch.tensor([start.elapsed_time(end) / 1e3 / iterations], device="cuda")
dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    print(json.dumps({"seconds": seconds.item()}))
dist.destroy_process_group()
