"""Server side: the jupyter_server extension (NVML sampler, REST API, Prometheus metrics).

Never imports torch: ``import torch`` costs seconds and the server must start fast.
"""
