"""Pure functions over figures that both sides read: no torch, no NVML, no I/O.

The kernel feeds them live ``torch.cuda.memory_stats()`` dicts and snapshot segment lists; tests
feed them the H200 fixtures, so the arithmetic is checked without a GPU.
"""
