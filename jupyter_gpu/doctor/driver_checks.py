"""Checks of the NVIDIA driver and the GPUs it shows: is a driver there and answering, which GPUs
does CUDA_VISIBLE_DEVICES leave, are they healthy (ECC, MIG), and can they be read (NVML's
bindings). Each reads what NVML said, never CUDA, so it speaks when torch cannot start.
"""

from __future__ import annotations

import re

from ..nvml.reasons import problem_of_kind
from ..nvml.visible import parse_visible_devices
from .check import Check, Status, count_names, driver_ok
from .facts import Facts
from .torch_builds import cuda_text

VISIBLE_FIX = (
    "Set CUDA_VISIBLE_DEVICES to GPU indices or UUIDs that exist (`nvidia-smi -L` lists them), "
    "e.g. `%env CUDA_VISIBLE_DEVICES=0`, or unset it, before CUDA starts in the kernel (or in "
    "the kernel's environment), then restart the kernel if CUDA had already started."
)


def _kernel_module(f: Facts) -> str | None:
    match = re.search(r"Kernel Module\s+(\S+)", f.driver_proc or "")
    return match[1] if match else None


def check_driver(f: Facts) -> Check:
    n, title = f.nvml, "NVIDIA driver"
    module = _kernel_module(f)
    if n.error_kind is None:
        cuda = f" (CUDA {cuda_text(n.cuda_driver_version)})" if n.cuda_driver_version else ""
        names = count_names(d.name for d in n.devices)
        return Check("driver", title, Status.OK, f"driver {n.driver_version}{cuda}: {names}")
    if n.error_kind in ("missing_bindings", "library_not_found") and (module or f.dev_nodes):
        seen = f"kernel module {module} is loaded" if module else f"/dev/{f.dev_nodes[0]} exists"
        if n.error_kind == "missing_bindings":
            return Check(
                "driver",
                title,
                Status.WARN,
                f"{seen}, but nvidia-ml-py is missing, so the GPUs cannot be read without CUDA",
                fix="`pip install nvidia-ml-py`",
            )
        return Check(
            "driver",
            title,
            Status.FAIL,
            f"{seen}, but the driver's libraries (libnvidia-ml.so.1, libcuda.so.1) are missing here",
            fix="In a container, start it through the NVIDIA Container Toolkit (`docker run "
            "--gpus all`), which mounts the driver's libraries; on the host, reinstall the "
            "driver's user-space package of the same version as the kernel module.",
        )
    if n.error_kind == "missing_bindings":  # no bindings, and no trace of a driver either
        return Check(
            "driver",
            title,
            Status.FAIL,
            "no NVIDIA driver or GPU in this environment: no nvidia kernel module, no /dev/nvidia*",
            fix=problem_of_kind("library_not_found", "").fix,
            detail=n.error,
        )
    problem = problem_of_kind(n.error_kind, n.error or "")
    return Check("driver", title, Status.FAIL, problem.summary, fix=problem.fix, detail=n.error)


def check_visible_devices(f: Facts) -> Check | None:
    value = f.env.get("CUDA_VISIBLE_DEVICES")
    title = "CUDA_VISIBLE_DEVICES"
    if value is None:
        if not driver_ok(f):
            return None
        return Check(
            "visible_devices", title, Status.OK, f"unset: all {len(f.nvml.devices)} GPUs are visible"
        )
    if not value.strip():
        return Check(
            "visible_devices",
            title,
            Status.FAIL,
            "CUDA_VISIBLE_DEVICES is set to an empty string, so CUDA sees no GPU",
            fix=VISIBLE_FIX,
        )
    uuids = [d.uuid for d in f.nvml.devices] if driver_ok(f) else None
    used, problem = parse_visible_devices(value, uuids)
    if not used:
        return Check(
            "visible_devices",
            title,
            Status.FAIL,
            f"CUDA_VISIBLE_DEVICES={value!r} selects no GPU: {problem}",
            fix=VISIBLE_FIX,
        )
    if problem:
        return Check(
            "visible_devices",
            title,
            Status.WARN,
            f"CUDA_VISIBLE_DEVICES={value!r}: CUDA uses only {','.join(used)}, because {problem}",
            fix=VISIBLE_FIX,
        )
    return Check("visible_devices", title, Status.OK, f"CUDA_VISIBLE_DEVICES={value}: {len(used)} selected")


def check_ecc(f: Facts) -> Check | None:
    if not driver_ok(f):
        return None
    title = "Uncorrected ECC errors"
    counted = [d for d in f.nvml.devices if d.ecc_uncorrected is not None]
    if not counted:
        return Check("ecc", title, Status.INFO, "not reported (ECC off or not supported on these GPUs)")
    bad = [d for d in counted if d.ecc_uncorrected]
    if not bad:
        return Check("ecc", title, Status.OK, "none since the driver loaded")
    d = bad[0]
    return Check(
        "ecc",
        title,
        Status.FAIL,
        f"GPU {d.index} ({d.name}): {d.ecc_uncorrected} uncorrected ECC errors since the driver loaded",
        fix=f"Results on that GPU can be wrong and CUDA may kill contexts on it: use another GPU "
        f"(CUDA_VISIBLE_DEVICES) and ask the administrator to check `nvidia-smi -q -d "
        f"ECC,PAGE_RETIREMENT,ROW_REMAPPER` and reset it (`nvidia-smi -r -i {d.index}`).",
    )


def check_mig(f: Facts) -> Check | None:
    if not driver_ok(f):
        return None
    title = "MIG mode"
    pending = [d for d in f.nvml.devices if d.mig_pending is not None and d.mig_pending != d.mig_current]
    if pending:
        d = pending[0]
        return Check(
            "mig",
            title,
            Status.WARN,
            f"GPU {d.index}: a MIG mode change is pending",
            fix=f"It takes effect after a GPU reset (`nvidia-smi -r -i {d.index}`) or a reboot.",
        )
    on = [str(d.index) for d in f.nvml.devices if d.mig_current]
    if on:
        return Check(
            "mig",
            title,
            Status.INFO,
            f"on for GPU {', '.join(on)}: a process uses one MIG instance, and NVML reports no "
            "utilisation for it",
            fix="Select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (`nvidia-smi -L` lists them).",
        )
    if all(d.mig_current is None for d in f.nvml.devices):
        return None
    return Check("mig", title, Status.OK, "off")


def check_nvml_package(f: Facts) -> Check:
    d, title = f.distributions, "NVML bindings"
    stray = [n for n in ("pynvml", "nvidia-ml-py3") if n in d]
    if stray:
        listed = ", ".join(f"{n} {d[n]}" for n in stray)
        return Check(
            "nvml_package",
            title,
            Status.WARN,
            f"{listed} installed: these and nvidia-ml-py all install the `pynvml` module and overwrite "
            "each other (pynvml ≥ 12 is a deprecated shim that warns on import)",
            fix=f"`pip uninstall -y {' '.join(stray)} && pip install --force-reinstall nvidia-ml-py`",
        )
    if "nvidia-ml-py" not in d:
        return Check(
            "nvml_package",
            title,
            Status.WARN,
            "nvidia-ml-py is not installed: GPUs cannot be read without starting CUDA",
            fix="`pip install nvidia-ml-py`",
        )
    return Check("nvml_package", title, Status.OK, f"nvidia-ml-py {d['nvidia-ml-py']}")
