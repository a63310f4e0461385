"""jupyter_gpu: GPU-aware Jupyter notebooks.

Three sides, three subpackages: ``server`` (jupyter_server extension: NVML sampler, REST,
Prometheus), ``kernel`` (the IPython side: magics and the kernel agent), and the JupyterLab
frontend (TypeScript under ``labextension/`` in the source tree, shipped prebuilt). What they
share is plain library code: ``nvml`` (the reader, its error table, process facts, visible GPUs),
``analysis`` (pure functions, units), ``doctor`` and ``warmup`` (which the magics and the
``cli`` run). Nothing here imports torch at import time; docs/contributing.md ("Layout") lists the import
rules and ``tests/test_layering.py`` checks them.
"""

from __future__ import annotations

try:
    from ._version import __version__
except ImportError:  # a source checkout that was never built
    __version__ = "0.0.0.dev0"

LABEXTENSION_NAME = "jupyter-gpu"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": LABEXTENSION_NAME}]


def _jupyter_server_extension_points() -> list[dict]:
    # Imported here so that `import jupyter_gpu` in a kernel pulls in no server code.
    from .server.app import GPUMonitor

    return [{"module": "jupyter_gpu", "app": GPUMonitor}]


def load_ipython_extension(ipython) -> None:
    from .kernel.extension import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    from .kernel.extension import unload

    unload(ipython)
