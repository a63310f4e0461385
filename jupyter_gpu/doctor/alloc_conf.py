"""``PYTORCH_CUDA_ALLOC_CONF`` read as torch's caching allocator reads it, without importing torch.

torch parses the variable when CUDA starts and stops at the first key it does not know or value it
cannot read; by then the kernel is running and the error looks like a broken GPU. Reading the text
here names the key before torch ever sees it. The option table follows torch 2.9–2.13's
``AcceleratorAllocatorConfig`` and ``CUDAAllocatorConfig`` parsers. ``check_alloc_conf`` is the
doctor's check of it; ``ALLOC_CONF_FIX`` is what other checks say when a failure comes from it.
"""

from __future__ import annotations

import re

from ..analysis.alloc_conf import split_options
from .check import Check, Status, cuda_build
from .facts import Facts

BOOL_OPTIONS = {
    "expandable_segments",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "release_lock_on_device_malloc",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "pinned_use_device_host_register",
    "pinned_use_background_threads",
    "graph_capture_record_stream_reuse",
}
MB_OPTIONS = {"max_split_size_mb", "max_non_split_rounding_mb"}
OTHER_OPTIONS = {
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "backend",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "per_process_memory_fraction",
}
KNOWN_OPTIONS = BOOL_OPTIONS | MB_OPTIONS | OTHER_OPTIONS
EXPANDABLE_HINT = (
    "For workloads whose tensor shapes vary (and fragment memory: see %gpu_mem), "
    "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before CUDA starts lets segments grow in place."
)
ALLOC_CONF_FIX = (
    "Caused by the allocator setting (see 'Allocator settings' below): correct or unset it, then restart "
    "the kernel."
)


def _power_of_two(text: str) -> bool:
    return text.isdigit() and int(text) > 0 and int(text) & (int(text) - 1) == 0


def parse_alloc_conf(text: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(options, errors torch stops at when CUDA starts, doubtful settings); each error names its key."""
    options: dict[str, str] = {}
    errors: list[str] = []
    doubts: list[str] = []
    for item in split_options(text):
        key, sep, value = (part.strip() for part in item.partition(":"))
        if not sep or not value:
            errors.append(f"'{key}' has no value (write key:value)")
            continue
        options[key] = value
        if key not in KNOWN_OPTIONS:
            errors.append(f"'{key}' is not an allocator option: torch stops at it with 'Unrecognized key'")
        elif key in BOOL_OPTIONS and value not in ("True", "False"):
            (doubts if value.lower() in ("true", "false") else errors).append(
                f"{key}:{value} must be True or False (capitalised; some torch versions reject other spellings)"
            )
        elif key in MB_OPTIONS and not (value.isdigit() and int(value) >= 20):
            errors.append(f"{key}:{value} must be a whole number of MiB, at least 20")
        elif key == "garbage_collection_threshold" and not re.fullmatch(r"0?\.\d*[1-9]\d*", value):
            errors.append(f"{key}:{value} must be a fraction strictly between 0 and 1")
        elif key == "backend" and value not in ("native", "cudaMallocAsync"):
            errors.append(f"backend:{value} must be native or cudaMallocAsync")
        elif key in ("roundup_power2_divisions", "pinned_num_register_threads") and not (
            value.startswith("[") or _power_of_two(value)
        ):
            errors.append(f"{key}:{value} must be a power of two")
    if "garbage_collection_threshold" in options and "per_process_memory_fraction" not in options:
        doubts.append(
            "garbage_collection_threshold only acts when a per-process memory fraction is set "
            "(torch.cuda.set_per_process_memory_fraction)"
        )
    native_only = {"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold"}
    if options.get("backend") == "cudaMallocAsync" and native_only & options.keys():
        doubts.append(
            "backend:cudaMallocAsync ignores max_split_size_mb, roundup_power2_divisions and "
            "garbage_collection_threshold"
        )
    return options, errors, doubts


def alloc_conf_errors(env: dict[str, str]) -> list[str]:
    """The errors in whichever allocator variable is set: what other checks blame a failure on."""
    return [
        e
        for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
        for e in parse_alloc_conf(env.get(name, ""))[1]
    ]


def check_alloc_conf(f: Facts) -> Check | None:
    """Read from the text alone, so it speaks even when torch could not be asked (a bad key can
    stop torch before it answers)."""
    title = "Allocator settings"
    values = {k: f.env[k] for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF") if f.env.get(k)}
    if not values:
        if not cuda_build(f):
            return None
        return Check(
            "alloc_conf",
            title,
            Status.OK,
            "PYTORCH_CUDA_ALLOC_CONF not set: default caching allocator",
            detail=EXPANDABLE_HINT,
        )
    if len(set(values.values())) > 1:
        return Check(
            "alloc_conf",
            title,
            Status.WARN,
            "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF differ; which one torch reads depends on "
            "its version",
            fix="Keep only one of them, then restart the kernel.",
        )
    name, text = next(iter(values.items()))
    options, errors, doubts = parse_alloc_conf(text)
    fix = (
        f"Correct or unset {name} in the kernel's environment (`%env {name}=` before torch starts, "
        "or the kernel spec's `env`), then restart the kernel. Options: "
        "https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"
    )
    if errors:
        return Check(
            "alloc_conf",
            title,
            Status.FAIL,
            f"{name}={text}: {errors[0]}",
            fix=fix,
            detail="\n".join(errors + doubts),
        )
    if doubts:
        return Check(
            "alloc_conf", title, Status.WARN, f"{name}={text}: {doubts[0]}", fix=fix, detail="\n".join(doubts)
        )
    if options.get("expandable_segments") == "True":
        return Check(
            "alloc_conf",
            title,
            Status.OK,
            f"{name}={text}: segments grow in place, so varying shapes fragment memory less",
            detail="The allocator's split statistics read 0 by design; %gpu_mem computes fragmentation "
            "from the snapshot.",
        )
    return Check("alloc_conf", title, Status.OK, f"{name}={text}", detail=EXPANDABLE_HINT)
