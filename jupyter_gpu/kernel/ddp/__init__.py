"""``%%ddp_launch`` and persistent DDP workers for notebooks, on ``torch.distributed.elastic``.

Kernel-side modules import no torch until a magic runs; ``worker`` and ``script`` run in the ranks.
"""
