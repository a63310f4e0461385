"""The one table of what a person can do when NVML cannot be used.

The server's reason fields, ``%gpu_monitor``, ``%gpu_mem``, ``jupyter gpu status`` and the doctor
say the same thing for the same failure: a ``Problem`` with a stable ``kind`` for programs, a
``summary`` (what is wrong) and a ``fix`` (what to do). ``errors.problem`` picks the entry for an
NVML error. Plain data without pynvml, so that the doctor can report that pynvml is missing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """Why NVML cannot be used. ``summary`` is a clause ("the NVIDIA driver is … not loaded")."""

    kind: str
    summary: str
    fix: str

    @property
    def sentence(self) -> str:
        """Summary and fix as one message, for a ``reason`` field or a one-line error."""
        return f"{self.summary[0].upper()}{self.summary[1:]}. {self.fix}"


PROBLEMS = {
    p.kind: p
    for p in (
        Problem(
            "library_not_found",
            "no NVIDIA driver found: NVIDIA's management library (libnvidia-ml.so.1) is not on this machine",
            "Install the NVIDIA driver on a machine with an NVIDIA GPU (`nvidia-smi` must work). In a "
            "container, pass the GPUs in: `docker run --gpus all` with the NVIDIA Container Toolkit, or "
            "request `nvidia.com/gpu` on Kubernetes; on JupyterHub pick a GPU server option. Without a "
            "GPU, torch runs on the CPU.",
        ),
        Problem(
            "driver_not_loaded",
            "the NVIDIA driver is installed but not loaded",
            "Load it (`sudo modprobe nvidia`) or reboot after installing or updating the driver; "
            "`nvidia-smi` must then list the GPUs.",
        ),
        Problem(
            "no_permission",
            "no permission to open /dev/nvidia*",
            "Add this user to the group that owns /dev/nvidia* (often `video`) or ask the administrator.",
        ),
        Problem(
            "version_mismatch",
            "the driver's kernel module and its libraries have different versions (a driver update "
            "without a reboot)",
            "Reboot, or unload and reload the nvidia kernel modules.",
        ),
        Problem(
            "no_devices",
            "the NVIDIA driver is loaded but reports no GPUs",
            "Run `nvidia-smi`; in a container pass the GPUs in (`docker run --gpus all`).",
        ),
    )
}


def problem_of_kind(kind: str, detail: str) -> Problem:
    """The entry for ``kind``; a failure without an entry of its own names NVML's ``detail``."""
    return PROBLEMS.get(kind) or Problem(
        "other", f"NVML failed: {detail}", "Run `nvidia-smi`: its error names the problem."
    )
