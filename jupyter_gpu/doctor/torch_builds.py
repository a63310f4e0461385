"""Which CUDA build of torch fits this driver and this GPU, and the pip line that installs it.

The tables are pytorch.org's; the doctor's fixes quote the command they lead to, so that a user
copies one line instead of reading the compatibility matrix.
"""

from __future__ import annotations

import re

from .facts import Facts

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


def version_tuple(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def cuda_text(version: tuple[int, int] | None) -> str:
    return f"{version[0]}.{version[1]}" if version else "?"


def build_cuda(build: str) -> tuple[int, int]:
    digits = build[2:]  # "cu128" -> (12, 8)
    return int(digits[:-1]), int(digits[-1])


def choose_build(torch_version: tuple[int, int] | None, driver_cuda: tuple[int, int] | None) -> str | None:
    """The newest CUDA build of this torch release that the driver runs; None if none does."""
    known = [v for v in CUDA_BUILDS if torch_version is None or v <= torch_version]
    builds = CUDA_BUILDS[max(known) if known else min(CUDA_BUILDS)]
    if driver_cuda is None:
        return builds[-1]
    fitting = [b for b in builds if build_cuda(b) <= driver_cuda]
    if fitting:
        return fitting[-1]
    same_major = [b for b in builds if build_cuda(b)[0] == driver_cuda[0]]
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


def reinstall_fix(f: Facts, prefix: str) -> str:
    """``prefix`` and the pip line for the build this driver runs, or why no build fits."""
    t = f.torch
    version = t.version or f.distributions.get("torch")
    build = choose_build(version_tuple(version), f.nvml.cuda_driver_version)
    if build is None:
        return (
            f"{prefix}This driver supports CUDA {cuda_text(f.nvml.cuda_driver_version)}, older than "
            f"every CUDA build of torch {version}: upgrade the NVIDIA driver first."
        )
    return f"{prefix}`{pip_install(version, f.distributions, build)}`, then restart the kernel."


def arch_entry(entry: str) -> tuple[str, tuple[int, int], str] | None:
    """ "sm_90a" -> ("sm", (9, 0), "a"); None for what is not an architecture."""
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", entry)
    return (match[1], (int(match[2]), int(match[3])), match[4]) if match else None


def arch_support(capability: tuple[int, int], arch_list: list[str]) -> str:
    """ "native" (compiled code runs), "ptx" (JIT-compiled at first use) or "none"."""
    entries = [e for e in map(arch_entry, arch_list) if e]
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
