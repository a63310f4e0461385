"""What torch itself says about CUDA, as JSON-able data.

The doctor reads the *build* facts in the kernel when torch is already imported there (they
never touch CUDA), but asks whether CUDA actually works (``is_available``, device capabilities,
the driver's own error message) in a short-lived child process unless the kernel has already
initialised CUDA: ``cuInit`` in the kernel would break fork-based launchers, and diagnosing must
not change what it diagnoses. Run as a script, this file prints the full facts as one JSON line;
it imports nothing but the standard library and torch so that it runs in any interpreter.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any


def _arch_list(torch: Any) -> list[str]:
    # Older torch.cuda.get_arch_list() called is_available() (cuInit) first; the flag string
    # itself is compiled in and safe to read.
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    text = flags() if flags else None
    return text.split() if text else []


def _cudnn(torch: Any) -> dict[str, Any]:
    """Initialises CUDA: ``cudnn.version()`` checks the cuDNN against every device's capability
    (``get_device_capability``, which goes through ``torch.cuda._lazy_init``)."""
    try:
        return {
            "cudnn_available": bool(torch.backends.cudnn.is_available()),
            "cudnn_version": torch.backends.cudnn.version(),
            "cudnn_error": None,
        }
    except RuntimeError as error:  # e.g. the loaded libcudnn is not the one torch was built with
        return {"cudnn_available": False, "cudnn_version": None, "cudnn_error": str(error)}


def _nccl(torch: Any) -> dict[str, Any]:
    import torch.distributed as dist

    available = dist.is_available() and dist.is_nccl_available()
    version = None
    if available:
        raw = torch.cuda.nccl.version()
        version = ".".join(map(str, raw)) if isinstance(raw, tuple) else str(raw)
    return {
        "distributed_available": dist.is_available(),
        "nccl_available": available,
        "nccl_version": version,
    }


def build_facts(torch: Any) -> dict[str, Any]:
    """What the installed torch was built with and how it is configured; never touches CUDA."""
    facts = {
        "installed": True,
        "executable": sys.executable,
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "arch_list": _arch_list(torch),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda_initialized": bool(torch.cuda.is_initialized()),
        "sharing_strategy": torch.multiprocessing.get_sharing_strategy(),
    }
    if torch.version.cuda:
        facts.update(_nccl(torch))
    return facts


def runtime_facts(torch: Any) -> dict[str, Any]:
    """Whether CUDA works, and the messages torch gives when it does not. Initialises CUDA."""
    facts: dict[str, Any] = {"runtime_probed": True, "runtime_error": None, "devices": []}
    if torch.version.cuda:
        facts.update(_cudnn(torch))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            facts["available"] = torch.cuda.is_available()
            facts["device_count"] = torch.cuda.device_count()
            if facts["available"]:
                facts["devices"] = [
                    {
                        "name": torch.cuda.get_device_name(i),
                        "capability": list(torch.cuda.get_device_capability(i)),
                    }
                    for i in range(facts["device_count"])
                ]
        except Exception as error:  # anything CUDA raises here is itself a finding
            facts["runtime_error"] = f"{type(error).__name__}: {error}"
    facts["init_warnings"] = [str(w.message) for w in caught]
    return facts


def torch_facts(runtime: bool) -> dict[str, Any]:
    try:
        import torch
    except ImportError as error:
        return {"installed": False, "executable": sys.executable, "import_error": str(error)}
    except Exception as error:  # installed but broken, e.g. a missing shared library
        return {
            "installed": True,
            "executable": sys.executable,
            "import_error": f"{type(error).__name__}: {error}",
        }
    facts = build_facts(torch)
    if runtime:
        facts.update(runtime_facts(torch))
    return facts


if __name__ == "__main__":
    print(json.dumps(torch_facts(runtime=True)))
