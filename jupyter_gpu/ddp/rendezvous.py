"""Several nodes: torch's own c10d (or static) rendezvous at the user's endpoint."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .torch_env import quiet_torch_logs

if TYPE_CHECKING:
    from .options import WorkerOptions

# Store requests of the kernel (the abort key) time out after this long.
STORE_TIMEOUT_S = 5.0


def join(opts: WorkerOptions) -> tuple[Any, Any, int, int, dict[str, str]]:
    """Rendezvous with the other nodes' kernels: (handler, store client, node rank, nodes,
    the ranks' env:// environment). The handler is shut down when the gang stops."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

    if opts.node_rank is not None:
        params = RendezvousParameters(
            "static", opts.rdzv_endpoint or "", "jupyter_gpu", opts.nnodes, opts.nnodes, rank=opts.node_rank
        )
    else:
        params = RendezvousParameters(
            "c10d", opts.rdzv_endpoint or "", "jupyter_gpu", opts.nnodes, opts.nnodes
        )
    with quiet_torch_logs():
        handler: Any = get_rendezvous_handler(params)
        info = handler.next_rendezvous()
    boot = info.bootstrap_store_info
    tcp = dist.TCPStore(
        boot.master_addr, boot.master_port, is_master=False, timeout=timedelta(seconds=STORE_TIMEOUT_S)
    )
    env = {
        "MASTER_ADDR": boot.master_addr,
        "MASTER_PORT": str(boot.master_port),
        "TORCHELASTIC_RUN_ID": handler.get_run_id(),
        "TORCHELASTIC_USE_AGENT_STORE": str(handler.use_agent_store),
    }
    return handler, tcp, info.rank, info.world_size, env
