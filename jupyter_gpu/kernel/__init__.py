"""Kernel side: IPython magics and the kernel agent. Loaded by ``%load_ext jupyter_gpu``."""
