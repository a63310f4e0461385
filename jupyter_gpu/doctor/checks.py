"""The doctor's checks: pure functions from ``Facts`` to ``Check``, each with a concrete fix.

The checklist's order is in ``checklist.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from ..analysis.units import format_bytes
from ..nvml.reasons import problem_of_kind
from ..nvml.visible import parse_visible_devices
from .alloc_conf import alloc_conf_errors, parse_alloc_conf
from .facts import Facts, TorchInfo
from .nvmlinfo import NvmlDevice


class Status(str, Enum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    status: Status
    summary: str
    fix: str | None = None
    detail: str | None = None


INDEX_URL = "https://download.pytorch.org/whl"
# CUDA builds published per torch release (pytorch.org "previous versions"); a release newer
# than the table is assumed to have the newest row's builds.
CUDA_BUILDS: dict[tuple[int, int], tuple[str, ...]] = {
    (2, 4): ("cu118", "cu121", "cu124"),
    (2, 6): ("cu118", "cu124", "cu126"),
    (2, 7): ("cu118", "cu126", "cu128"),
    (2, 8): ("cu126", "cu128", "cu129"),
    (2, 9): ("cu126", "cu128", "cu130"),
}
# Oldest driver that runs any toolkit of a CUDA major version (minor-version compatibility).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580"}
SHM_MIN_BYTES = 1 << 30
SHM_FIX = (
    "Give the container more: `docker run --shm-size=8g` (or `--ipc=host`); on Kubernetes mount an "
    "emptyDir with `medium: Memory` at /dev/shm. Or use DataLoader(num_workers=0)."
)
EXPANDABLE_HINT = (
    "For workloads whose tensor shapes vary (and fragment memory: see %gpu_mem), "
    "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` before CUDA starts lets segments grow in place."
)
ALLOC_CONF_FIX = (
    "Caused by the allocator setting (see 'Allocator settings' below): correct or unset it, then restart "
    "the kernel."
)
VISIBLE_FIX = (
    "Set CUDA_VISIBLE_DEVICES to GPU indices or UUIDs that exist (`nvidia-smi -L` lists them), "
    "e.g. `%env CUDA_VISIBLE_DEVICES=0`, or unset it, before CUDA starts in the kernel (or in "
    "the kernel's environment), then restart the kernel if CUDA had already started."
)


# -- helpers ---------------------------------------------------------------------------------


def version_tuple(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def _build_cuda(build: str) -> tuple[int, int]:
    digits = build[2:]  # "cu128" -> (12, 8)
    return int(digits[:-1]), int(digits[-1])


def choose_build(torch_version: tuple[int, int] | None, driver_cuda: tuple[int, int] | None) -> str | None:
    """The newest CUDA build of this torch release that the driver runs; None if none does."""
    known = [v for v in CUDA_BUILDS if torch_version is None or v <= torch_version]
    builds = CUDA_BUILDS[max(known) if known else min(CUDA_BUILDS)]
    if driver_cuda is None:
        return builds[-1]
    fitting = [b for b in builds if _build_cuda(b) <= driver_cuda]
    if fitting:
        return fitting[-1]
    same_major = [b for b in builds if _build_cuda(b)[0] == driver_cuda[0]]
    return same_major[0] if same_major else None


def pip_install(version: str | None, distributions: dict[str, str], build: str) -> str:
    """The pip command that installs this torch version (and its companions) for ``build``."""
    base = version.split("+")[0] if version else None
    nightly = bool(base and ".dev" in base)
    packages = ["torch" if base is None or nightly else f"torch=={base}"]
    packages += [p for p in ("torchvision", "torchaudio") if p in distributions]
    flags = ["--pre"] if nightly else []
    flags += ["--force-reinstall"] if version else []
    index = f"{INDEX_URL}/nightly/{build}" if nightly else f"{INDEX_URL}/{build}"
    return " ".join(["pip install", *flags, *packages, "--index-url", index])


def _cuda_build(f: Facts) -> bool:
    return bool(f.torch.installed and not f.torch.import_error and f.torch.cuda)


def _driver_ok(f: Facts) -> bool:
    return f.nvml.error_kind is None and bool(f.nvml.devices)


def _cuda_text(version: tuple[int, int] | None) -> str:
    return f"{version[0]}.{version[1]}" if version else "?"


def count_names(names: Iterable[str | None]) -> str:
    """ "2× NVIDIA H200" rather than the same name twice."""
    counts = Counter(n or "unnamed GPU" for n in names)
    return ", ".join(f"{c}× {n}" if c > 1 else n for n, c in counts.items())


def _reinstall_fix(f: Facts, prefix: str) -> str:
    t = f.torch
    version = t.version or f.distributions.get("torch")
    build = choose_build(version_tuple(version), f.nvml.cuda_driver_version)
    if build is None:
        return (
            f"{prefix}This driver supports CUDA {_cuda_text(f.nvml.cuda_driver_version)}, older than "
            f"every CUDA build of torch {version}: upgrade the NVIDIA driver first."
        )
    return f"{prefix}`{pip_install(version, f.distributions, build)}`, then restart the kernel."


# -- checks, in checklist order --------------------------------------------------------------


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
            fix=_reinstall_fix(f, "Install it: "),
        )
    if t.import_error:
        return Check(
            "torch",
            "PyTorch",
            Status.FAIL,
            f"`import torch` fails: {t.import_error}",
            fix=_reinstall_fix(f, "Reinstall it: "),
        )
    return Check("torch", "PyTorch", Status.OK, f"torch {t.version} ({where})")


def _kernel_module(f: Facts) -> str | None:
    match = re.search(r"Kernel Module\s+(\S+)", f.driver_proc or "")
    return match[1] if match else None


def check_driver(f: Facts) -> Check:
    n, title = f.nvml, "NVIDIA driver"
    module = _kernel_module(f)
    if n.error_kind is None:
        cuda = f" (CUDA {_cuda_text(n.cuda_driver_version)})" if n.cuda_driver_version else ""
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
    if _driver_ok(f):
        return Check(
            "build",
            "torch CUDA build",
            Status.FAIL,
            f"torch {t.version} is a CPU-only build (torch.version.cuda is None)",
            fix=_reinstall_fix(f, "Install a CUDA build: "),
        )
    return Check(
        "build",
        "torch CUDA build",
        Status.WARN,
        f"torch {t.version} is a CPU-only build: even with a GPU it would not use it",
        fix=_reinstall_fix(f, "Once a GPU is available, install a CUDA build: "),
    )


def _too_old_warning(t: TorchInfo) -> str | None:
    return next((w for w in t.init_warnings if "too old" in w), None)


def check_driver_cuda(f: Facts) -> Check | None:
    t, n = f.torch, f.nvml
    needed = version_tuple(t.cuda)
    have = n.cuda_driver_version
    too_old = _too_old_warning(t)
    if not _cuda_build(f) or needed is None or (have is None and too_old is None):
        return None
    title = "Driver vs torch's CUDA"
    if too_old or (have is not None and have[0] < needed[0]):
        driver = f"driver {n.driver_version} (CUDA {_cuda_text(have)})" if have else "the NVIDIA driver"
        minimum = MIN_DRIVER.get(needed[0], f"one for CUDA {t.cuda}")
        build = choose_build(version_tuple(t.version), have) if have else None
        other = ""
        if build and _build_cuda(build) < needed:
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
            f"driver CUDA {_cuda_text(have)} < torch's CUDA {t.cuda}: runs through CUDA minor-version "
            f"compatibility (any driver ≥ {MIN_DRIVER.get(needed[0], '?')})",
            detail="Code that needs JIT compilation of newer PTX may still fail; a newer driver avoids that.",
        )
    return Check(
        "driver_cuda", title, Status.OK, f"driver supports CUDA {_cuda_text(have)}; torch needs {t.cuda}"
    )


def _uuids(devices: list[NvmlDevice]) -> list[str | None]:
    return [d.uuid for d in devices]


def check_visible_devices(f: Facts) -> Check | None:
    value = f.env.get("CUDA_VISIBLE_DEVICES")
    title = "CUDA_VISIBLE_DEVICES"
    if value is None:
        if not _driver_ok(f):
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
    used, problem = parse_visible_devices(value, _uuids(f.nvml.devices) if _driver_ok(f) else None)
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


def _arch_entry(entry: str) -> tuple[str, tuple[int, int], str] | None:
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", entry)
    return (match[1], (int(match[2]), int(match[3])), match[4]) if match else None


def arch_support(capability: tuple[int, int], arch_list: list[str]) -> str:
    """ "native" (compiled code runs), "ptx" (JIT-compiled at first use) or "none"."""
    entries = [e for e in map(_arch_entry, arch_list) if e]
    for kind, (major, minor), suffix in entries:
        exact_only = suffix == "a"  # sm_90a code runs on sm_90 only
        if (
            kind == "sm"
            and major == capability[0]
            and (minor == capability[1] or (minor < capability[1] and not exact_only))
        ):
            return "native"
    if any(kind == "compute" and cap <= capability for kind, cap, _ in entries):
        return "ptx"
    return "none"


def _visible_gpus(f: Facts) -> list[tuple[str, tuple[int, int]]]:
    """(name, capability) of the GPUs torch will use: torch's answer, else NVML's."""
    if f.torch.devices:
        return [(d["name"], tuple(d["capability"])) for d in f.torch.devices]
    value = f.env.get("CUDA_VISIBLE_DEVICES")
    devices = f.nvml.devices if f.nvml.error_kind is None else []
    if value is not None:
        used, _ = parse_visible_devices(value, _uuids(devices))
        indices = {int(t) for t in used if t.isdigit()}
        devices = [
            d for d in devices if d.index in indices or any(d.uuid and d.uuid.startswith(t) for t in used)
        ]
    return [(d.name or "GPU", d.capability) for d in devices if d.capability]


def check_arch(f: Facts) -> Check | None:
    t = f.torch
    gpus = _visible_gpus(f)
    if not _cuda_build(f) or not t.arch_list or not gpus:
        return None
    title = "GPU architecture in torch's build"
    built = " ".join(t.arch_list)
    support = [(name, cap, arch_support(cap, t.arch_list)) for name, cap in gpus]
    newest = max((e[1] for e in map(_arch_entry, t.arch_list) if e), default=(0, 0))
    for name, cap, how in support:
        if how == "native":
            continue
        sm = f"sm_{cap[0]}{cap[1]}"
        if cap > newest:
            fix = _reinstall_fix(f, "Newer GPUs need a build with a newer CUDA: ")
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
    if not _cuda_build(f):
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


def check_ecc(f: Facts) -> Check | None:
    if not _driver_ok(f):
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
    if not _driver_ok(f):
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


def check_cudnn(f: Facts) -> Check | None:
    t = f.torch
    if not _cuda_build(f) or t.cudnn_available is None:
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
            fix=_reinstall_fix(f, "Official Linux CUDA builds ship cuDNN: "),
        )
    v = t.cudnn_version
    major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
    return Check(
        "cudnn", title, Status.OK, f"cuDNN {major}.{rest // 100}.{rest % 100} (the one torch loaded)"
    )


def check_nccl(f: Facts) -> Check | None:
    t = f.torch
    if not _cuda_build(f) or t.distributed_available is None:
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
        fix=_reinstall_fix(f, "Official Linux CUDA builds include NCCL: "),
    )


def check_tf32(f: Facts) -> Check | None:
    t = f.torch
    if not _cuda_build(f) or t.matmul_precision is None:
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


def check_alloc_conf(f: Facts) -> Check | None:
    """Read from the text alone, so it speaks even when torch could not be asked (a bad key can
    stop torch before it answers)."""
    title = "Allocator settings"
    values = {k: f.env[k] for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF") if f.env.get(k)}
    if not values:
        if not _cuda_build(f):
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


def check_module_loading(f: Facts) -> Check | None:
    if not _cuda_build(f) or f.env.get("CUDA_MODULE_LOADING", "").upper() != "EAGER":
        return None
    return Check(
        "module_loading",
        "CUDA_MODULE_LOADING",
        Status.WARN,
        "EAGER loads every CUDA kernel at start-up: seconds more to start, and a context of "
        "~900 MiB instead of ~300 MiB",
        fix="Unset CUDA_MODULE_LOADING (lazy loading is the default), then restart the kernel.",
    )


def check_shm(f: Facts) -> Check | None:
    """The rule of thumb (1 GiB); a DataLoader the user described is checked against its own need."""
    title = "/dev/shm"
    fix = SHM_FIX
    if f.shm is None:
        return Check(
            "shm",
            title,
            Status.WARN,
            "/dev/shm is missing: DataLoader workers (num_workers > 0) pass batches through it",
            fix=fix,
        )
    if f.dataloader is not None:
        return None
    total, free = f.shm.total_bytes, f.shm.free_bytes
    if total < SHM_MIN_BYTES:
        return Check(
            "shm",
            title,
            Status.WARN,
            f"/dev/shm is only {format_bytes(total)}: DataLoader workers die with a 'bus error' "
            "(insufficient shared memory) once batches outgrow it",
            fix=fix,
        )
    if free < SHM_MIN_BYTES // 4:
        return Check(
            "shm",
            title,
            Status.WARN,
            f"/dev/shm is nearly full: {format_bytes(free)} free of {format_bytes(total)}",
            fix="Remove stale files in /dev/shm (crashed workers leave them behind).",
        )
    return Check("shm", title, Status.OK, f"{format_bytes(total)} ({format_bytes(free)} free)")


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


def check_server(f: Facts) -> Check | None:
    title = "jupyter_gpu server extension"
    if f.servers is None:
        return None
    if not f.servers:
        return Check(
            "server",
            title,
            Status.INFO,
            "no running Jupyter server found from here (a plain IPython, or a remote kernel)",
        )
    if any(s.status == 200 for s in f.servers):
        url = next(s.url for s in f.servers if s.status == 200)
        return Check("server", title, Status.OK, f"reachable: {url}")
    s = f.servers[0]
    if s.status == 404:
        return Check(
            "server",
            title,
            Status.WARN,
            f"the server answers but has no GPU routes ({s.url} → 404)",
            fix="`jupyter server extension enable jupyter_gpu`, then restart the server "
            "(`jupyter server extension list` shows whether it loaded).",
        )
    if s.status in (401, 403):
        return Check(
            "server",
            title,
            Status.WARN,
            f"the server refused this kernel's token ({s.url} → {s.status})",
            fix="Open the notebook from that server, or check its authentication settings.",
        )
    # The client's error names the address itself, e.g. "cannot reach http://…: Connection refused".
    what = s.error or f"could not reach {s.url}: HTTP {s.status}"
    return Check(
        "server",
        title,
        Status.WARN,
        what,
        fix="A stopped server may have left its runtime file behind; `jupyter server list` shows which run.",
    )
