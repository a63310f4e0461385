"""Checks of torch and its CUDA side: is torch there, built for CUDA, for this driver and this
GPU's architecture, does CUDA start, and do the libraries it ships (cuDNN, NCCL) load. Each fix
names the pip line of the build that fits (``torch_builds``).
"""

from __future__ import annotations

import re

from ..nvml.visible import parse_visible_devices
from .alloc_conf import ALLOC_CONF_FIX, alloc_conf_errors
from .check import Check, Status, count_names, cuda_build, driver_ok
from .facts import Facts, TorchInfo
from .torch_builds import (
    MIN_DRIVER,
    arch_entry,
    arch_support,
    build_cuda,
    choose_build,
    cuda_text,
    pip_install,
    reinstall_fix,
    version_tuple,
)


def check_torch(f: Facts) -> Check:
    t = f.torch
    where = t.executable or "this kernel's Python"
    if t.installed is None:
        return Check(
            "torch",
            "PyTorch",
            Status.WARN,
            f"could not ask torch: {t.runtime_error}",
            fix=ALLOC_CONF_FIX
            if alloc_conf_errors(f.env)
            else "Run `python -c 'import torch'` in this environment to see the error.",
        )
    if not t.installed:
        return Check(
            "torch",
            "PyTorch",
            Status.FAIL,
            f"torch is not installed for {where}",
            fix=reinstall_fix(f, "Install it: "),
        )
    if t.import_error:
        return Check(
            "torch",
            "PyTorch",
            Status.FAIL,
            f"`import torch` fails: {t.import_error}",
            fix=reinstall_fix(f, "Reinstall it: "),
        )
    return Check("torch", "PyTorch", Status.OK, f"torch {t.version} ({where})")


def check_build(f: Facts) -> Check | None:
    t = f.torch
    if not t.installed or t.import_error:
        return None
    if t.hip:
        return Check(
            "build",
            "torch CUDA build",
            Status.INFO,
            f"torch {t.version} is a ROCm build (HIP {t.hip}); these checks are for NVIDIA GPUs",
        )
    if t.cuda:
        return Check("build", "torch CUDA build", Status.OK, f"torch {t.version} is built for CUDA {t.cuda}")
    if driver_ok(f):
        return Check(
            "build",
            "torch CUDA build",
            Status.FAIL,
            f"torch {t.version} is a CPU-only build (torch.version.cuda is None)",
            fix=reinstall_fix(f, "Install a CUDA build: "),
        )
    return Check(
        "build",
        "torch CUDA build",
        Status.WARN,
        f"torch {t.version} is a CPU-only build: even with a GPU it would not use it",
        fix=reinstall_fix(f, "Once a GPU is available, install a CUDA build: "),
    )


def _too_old_warning(t: TorchInfo) -> str | None:
    return next((w for w in t.init_warnings if "too old" in w), None)


def check_driver_cuda(f: Facts) -> Check | None:
    t, n = f.torch, f.nvml
    needed = version_tuple(t.cuda)
    have = n.cuda_driver_version
    too_old = _too_old_warning(t)
    if not cuda_build(f) or needed is None or (have is None and too_old is None):
        return None
    title = "Driver vs torch's CUDA"
    if too_old or (have is not None and have[0] < needed[0]):
        driver = f"driver {n.driver_version} (CUDA {cuda_text(have)})" if have else "the NVIDIA driver"
        minimum = MIN_DRIVER.get(needed[0], f"one for CUDA {t.cuda}")
        build = choose_build(version_tuple(t.version), have) if have else None
        other = ""
        if build and build_cuda(build) < needed:
            other = f", or install the torch build for your driver: `{pip_install(t.version, f.distributions, build)}`"
        return Check(
            "driver_cuda",
            title,
            Status.FAIL,
            f"{driver} is too old for torch {t.version}, built for CUDA {t.cuda}",
            fix=f"Upgrade the NVIDIA driver to {minimum} or newer{other}.",
            detail=too_old,
        )
    if have is not None and have < needed:
        return Check(
            "driver_cuda",
            title,
            Status.INFO,
            f"driver CUDA {cuda_text(have)} < torch's CUDA {t.cuda}: runs through CUDA minor-version "
            f"compatibility (any driver ≥ {MIN_DRIVER.get(needed[0], '?')})",
            detail="Code that needs JIT compilation of newer PTX may still fail; a newer driver avoids that.",
        )
    return Check(
        "driver_cuda", title, Status.OK, f"driver supports CUDA {cuda_text(have)}; torch needs {t.cuda}"
    )


def _visible_gpus(f: Facts) -> list[tuple[str, tuple[int, int]]]:
    """(name, capability) of the GPUs torch will use: torch's answer, else NVML's."""
    if f.torch.devices:
        return [(d["name"], tuple(d["capability"])) for d in f.torch.devices]
    value = f.env.get("CUDA_VISIBLE_DEVICES")
    devices = f.nvml.devices if f.nvml.error_kind is None else []
    if value is not None:
        used, _ = parse_visible_devices(value, [d.uuid for d in devices])
        indices = {int(t) for t in used if t.isdigit()}
        devices = [
            d for d in devices if d.index in indices or any(d.uuid and d.uuid.startswith(t) for t in used)
        ]
    return [(d.name or "GPU", d.capability) for d in devices if d.capability]


def check_arch(f: Facts) -> Check | None:
    t = f.torch
    gpus = _visible_gpus(f)
    if not cuda_build(f) or not t.arch_list or not gpus:
        return None
    title = "GPU architecture in torch's build"
    built = " ".join(t.arch_list)
    support = [(name, cap, arch_support(cap, t.arch_list)) for name, cap in gpus]
    newest = max((e[1] for e in map(arch_entry, t.arch_list) if e), default=(0, 0))
    for name, cap, how in support:
        if how == "native":
            continue
        sm = f"sm_{cap[0]}{cap[1]}"
        if cap > newest:
            fix = reinstall_fix(f, "Newer GPUs need a build with a newer CUDA: ")
        else:
            fix = (
                f"torch {t.version} dropped {sm}: install an older torch release that still lists it "
                "(https://pytorch.org/get-started/previous-versions/)."
            )
        if how == "ptx":
            return Check(
                "arch",
                title,
                Status.WARN,
                f"{name} ({sm}) has no compiled code in torch {t.version}; CUDA JIT-compiles PTX at "
                "first use (minutes)",
                fix=fix,
                detail=f"built for: {built}",
            )
        return Check(
            "arch",
            title,
            Status.FAIL,
            f"{name} ({sm}) is not supported by torch {t.version}",
            fix=fix,
            detail=f"built for: {built}",
        )
    sms = ", ".join(sorted({f"sm_{c[0]}{c[1]}" for _, c, _ in support}))
    return Check("arch", title, Status.OK, f"{sms} is in torch's build", detail=f"built for: {built}")


def _first_sentence(message: str) -> str:
    message = re.sub(r"\s*\(Triggered internally at .*", "", message, flags=re.S)
    message = message.removeprefix("CUDA initialization: ").strip()
    return re.split(r"(?<=[.!])\s", message, maxsplit=1)[0]


def check_cuda(f: Facts) -> Check | None:
    t = f.torch
    if not cuda_build(f):
        return None
    title = "torch.cuda.is_available()"
    if not t.runtime_probed:
        return Check(
            "cuda",
            title,
            Status.WARN,
            f"could not ask torch whether CUDA works: {t.runtime_error}",
            fix=ALLOC_CONF_FIX
            if alloc_conf_errors(f.env)
            else "Run `python -c 'import torch; print(torch.cuda.is_available())'` to see the error.",
        )
    where = (
        "this kernel" if t.source == "kernel" else "a separate process (CUDA is not started in this kernel)"
    )
    if t.available:
        names = count_names(d["name"] for d in t.devices)
        return Check("cuda", title, Status.OK, f"True: {names}", detail=f"asked in {where}")
    messages = [_first_sentence(m) for m in t.init_warnings]
    if t.runtime_error:
        messages.append(t.runtime_error)
    reason = messages[0] if messages else "CUDA found no device"
    fix = "Run `nvidia-smi`; fix what it reports, then restart the kernel."
    if alloc_conf_errors(f.env):
        fix = ALLOC_CONF_FIX
    elif any("CUDA_VISIBLE_DEVICES after program start" in m for m in t.init_warnings):
        fix = "Restart the kernel, and set CUDA_VISIBLE_DEVICES before the first CUDA call."
    return Check(
        "cuda",
        title,
        Status.FAIL,
        f"False: {reason}",
        fix=fix,
        detail="\n".join(t.init_warnings + [f"asked in {where}"]),
    )


def check_cudnn(f: Facts) -> Check | None:
    t = f.torch
    if not cuda_build(f) or t.cudnn_available is None:
        return None
    title = "cuDNN"
    if t.cudnn_error:
        return Check(
            "cudnn",
            title,
            Status.FAIL,
            f"cuDNN cannot be used: {_first_sentence(t.cudnn_error)}",
            fix="Another libcudnn is probably loaded first (check LD_LIBRARY_PATH); reinstalling torch "
            "brings back the cuDNN it pins.",
            detail=t.cudnn_error,
        )
    if not t.cudnn_available or not t.cudnn_version:
        return Check(
            "cudnn",
            title,
            Status.WARN,
            "not available: convolutions use slower fallback kernels",
            fix=reinstall_fix(f, "Official Linux CUDA builds ship cuDNN: "),
        )
    v = t.cudnn_version
    major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
    return Check(
        "cudnn", title, Status.OK, f"cuDNN {major}.{rest // 100}.{rest % 100} (the one torch loaded)"
    )


def check_nccl(f: Facts) -> Check | None:
    t = f.torch
    if not cuda_build(f) or t.distributed_available is None:
        return None
    title = "NCCL"
    if t.nccl_available:
        return Check("nccl", title, Status.OK, f"NCCL {t.nccl_version}")
    what = "torch.distributed is not available" if not t.distributed_available else "no NCCL in this build"
    return Check(
        "nccl",
        title,
        Status.WARN,
        f"{what}: multi-GPU training falls back to gloo (slow)",
        fix=reinstall_fix(f, "Official Linux CUDA builds include NCCL: "),
    )


def check_tf32(f: Facts) -> Check | None:
    t = f.torch
    if not cuda_build(f) or t.matmul_precision is None:
        return None
    matmul_on = t.matmul_precision != "highest"
    summary = (
        f"fp32 matmuls: precision '{t.matmul_precision}' (TF32 {'on' if matmul_on else 'off'}); "
        f"cuDNN convolutions: TF32 {'on' if t.cudnn_allow_tf32 else 'off'}"
    )
    ampere = any(cap >= (8, 0) for _, cap in _visible_gpus(f))
    fix = None
    if ampere and not matmul_on:
        fix = (
            "For faster fp32 training on these GPUs: `torch.set_float32_matmul_precision('high')` "
            "(TF32 keeps a 10-bit mantissa), or `%%amp --tf32 on` for one cell."
        )
    return Check("tf32", "TF32", Status.INFO, summary, fix=fix)
