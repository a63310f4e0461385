"""The DDP magics (``%%ddp_launch``, ``%ddp_start`` ... ``%%ddp``, checkpoints): parsing, and
what runs in the kernel. The ranks and their launcher are ``jupyter_gpu.ddp``.
"""
