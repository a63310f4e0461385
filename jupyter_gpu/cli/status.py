"""``jupyter gpu status``: the GPUs and who holds their memory, like nvidia-smi, plus notebooks.
A GPU in MIG mode is followed by its MIG devices, each with its memory and processes.

With a Jupyter server (``--url``, or one found running here) the figures come from the server's
sampler and every GPU process is named by the kernel and notebook the server joined it to (its
kernels reply, read by ``server.owners.attributed``); without one they come from NVML directly
and processes are named by command line. Never imports torch. The replies are read as the
TypedDicts of ``server/schema/replies.py``, field by field with ``.get``: a server of another
version or kind may stray from them (``_checked`` turns what breaks into one line).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any, cast

from ..server.owners import attributed
from . import slurm_status
from .common import EXIT_NO_GPU, EXIT_OK, EXIT_USAGE, CliError, print_json
from .server import Server, find_server, get, server_from_url
from .status_table import render

if TYPE_CHECKING:
    from ..server.schema.replies import DevicesReply, GpuProcess, Kernel, KernelsReply, TelemetryReply

REASON_CHARS = 200  # a reply's reason shown in a table cell, at most
GPM_WINDOW = 0.25  # seconds GPM's SM activity is averaged over when NVML is read here
GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "state",
    "error",
    "utilization_gpu_percent",
    "sm_active_percent",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_celsius",
    "power_watts",
    "power_limit_watts",
    "mig",
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "status",
        help="GPUs, their processes, and the notebooks holding GPU memory",
        description="A table like nvidia-smi's. With a Jupyter server (--url, or one found running "
        "on this machine) every GPU process is shown with the notebook whose kernel owns it.",
    )
    p.add_argument(
        "--url", help="a Jupyter server's URL, base_url included (default: look for a running one)"
    )
    p.add_argument("--token", default=None, help="that server's token (default: $JUPYTER_TOKEN)")
    p.add_argument("--no-server", action="store_true", help="read NVML here; do not ask a Jupyter server")
    p.add_argument(
        "--slurm",
        action="store_true",
        help="list your jupyter_gpu jobs and job steps in Slurm's queue instead (no GPU or server asked)",
    )
    p.add_argument("--json", action="store_true", help="print JSON, for scripts")
    p.set_defaults(run=run)


def from_nvml() -> dict[str, Any]:
    """Read this machine's GPUs directly (no notebook attribution: only a server knows kernels)."""
    from ..nvml import GpuLost, NvmlReader, NvmlUnavailable
    from ..nvml.processes import describe

    status = _empty("nvml", None, simulated=False)
    reader = NvmlReader()

    def lost(index: int, error: GpuLost, mig: Any = None) -> dict[str, Any]:
        return {
            "index": index,
            "mig": mig,
            "state": "lost",
            "error": f"stopped answering ({error}): it needs a reset or a reboot",
        }

    try:
        reader.open()
        status.update(reader.system())
        devices: list[dict[str, Any]] = []  # in nvitop's order, lost ones in their place
        for info, _ in reader.devices(on_lost=lambda index, error: devices.append(lost(index, error))):
            devices.append(info)
        for info in (d for d in devices if "state" not in d):  # GPM averages since a reading before
            try:
                reader.fast(info["index"])
            except GpuLost:
                pass  # told below
        time.sleep(GPM_WINDOW)
        for info in devices:
            index = info["index"]
            if "state" in info:
                status["gpus"].append(info)
                continue
            try:
                values, _ = reader.fast(index)
            except GpuLost as error:
                status["gpus"].append(lost(index, error, info["mig"]))
                continue
            status["gpus"].append({**info, **values, "state": "ok", "error": None})
            for proc in values.get("processes") or ():
                meta = describe(proc["pid"])
                command = meta.command if meta.same_namespace is not False else None
                status["processes"].append(_process(index, proc, command=command, user=meta.user))
    except NvmlUnavailable as error:
        return {**status, "available": False, "reason": error.reason, "problem": error.problem.kind}
    finally:
        reader.close()
    status["available"] = True
    status["gpus"] = [{k: gpu.get(k) for k in GPU_FIELDS} for gpu in status["gpus"]]
    return status


def from_server(server: Server) -> dict[str, Any]:
    """The server's latest sample joined with its kernels: each GPU process with its notebook."""
    devices = cast("DevicesReply", get(server, "devices"))
    status = _empty("server", server.url, simulated=bool(devices.get("simulated")))
    status["driver_version"] = devices.get("driver_version")
    status["cuda_driver_version"] = devices.get("cuda_driver_version")
    telemetry = cast("TelemetryReply", get(server, f"telemetry?since={time.time():.3f}"))
    latest = telemetry.get("latest")
    if not telemetry.get("available") or not isinstance(latest, dict):
        return {
            **status,
            "available": False,
            "reason": telemetry.get("reason") or devices.get("reason"),
            "problem": telemetry.get("problem") or devices.get("problem"),
        }
    kernels = cast("KernelsReply", get(server, "kernels"))
    static = {d.get("index"): d for d in devices.get("devices") or [] if isinstance(d, dict)}
    status["kernels"] = [_kernel(kernel) for kernel in kernels.get("kernels") or []]
    owner = attributed(kernels)  # the server's join of its GPU processes to its kernels
    others = {(p.get("gpu_index"), p.get("pid")): p for p in kernels.get("unattributed") or []}
    for gpu in latest.get("gpus") or []:
        index = gpu.get("index")
        device = static.get(index)  # what the sample leaves out (the name), from the devices reply
        status["gpus"].append({k: gpu.get(k, None if device is None else device.get(k)) for k in GPU_FIELDS})
        for proc in gpu.get("processes") or []:
            key = (index, proc.get("pid"))
            if key in owner:
                kernel = owner[key]
                status["processes"].append(
                    _process(index, proc, kernel_id=kernel.get("id"), notebook=kernel.get("path"))
                )
            elif key in others:  # absent from both: another user's, counted in hidden_processes
                other = others[key]
                status["processes"].append(
                    _process(
                        index,
                        proc,
                        command=other.get("command"),
                        user=other.get("user"),
                        reason=other.get("reason"),
                    )
                )
    status["hidden_processes"] = kernels.get("hidden_processes")
    status["idle"] = {
        "after_seconds": kernels.get("idle_after_seconds"),
        "min_memory_bytes": kernels.get("idle_min_memory_bytes"),
    }
    status["available"] = True
    return status


def _kernel(kernel: Kernel) -> dict[str, Any]:
    """A kernel of the reply as the status shows it."""
    allocator = kernel.get("allocator")
    return {
        "id": kernel.get("id"),
        "notebook": kernel.get("path"),
        "pid": kernel.get("pid"),
        "execution_state": kernel.get("execution_state"),
        "idle_seconds": kernel.get("idle_seconds"),
        "idle_holding": bool(kernel.get("idle_holding")),
        "gpu_memory": [
            {"gpu_index": r.get("gpu_index"), "used_memory_bytes": r.get("used_memory_bytes")}
            for r in kernel.get("gpu_memory") or []
        ],
        # null: no figures from the kernel; the state and the reason say why (not loaded,
        # or e.g. another user's file holding its name in a shared runtime dir)
        "allocator_state": _short(kernel.get("allocator_state")),
        "allocator_reason": _short(kernel.get("allocator_reason")),
        "allocator": {
            "cuda_in_use": bool(allocator.get("cuda_in_use")),
            "devices": [
                {k: d.get(k) for k in ("index", "allocated_bytes", "reserved_bytes")}
                for d in allocator.get("devices") or []
            ],
        }
        if isinstance(allocator, dict)
        else None,
    }


def _empty(kind: str, url: str | None, *, simulated: bool) -> dict[str, Any]:
    return {
        "source": {"kind": kind, "url": url, "simulated": simulated},
        "available": False,
        "reason": None,
        "problem": None,  # the kind of reason, for scripts: library_not_found, driver_not_loaded, ...
        "driver_version": None,
        "cuda_driver_version": None,
        "gpus": [],
        "processes": [],
        "kernels": None,  # null: no server was asked, so kernels are unknown (not absent)
        "hidden_processes": None,
        "idle": None,  # the server's thresholds for flagging idle kernels that hold GPU memory
        "notes": [],
    }


def _short(value: Any) -> str | None:
    """A string of the server's reply, cut to one table cell's worth."""
    return value[:REASON_CHARS] if isinstance(value, str) else None


def _process(
    index: int,
    proc: GpuProcess,
    *,
    kernel_id: str | None = None,
    notebook: str | None = None,
    command: str | None = None,
    user: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    return {
        "gpu_index": index,
        "pid": proc.get("pid"),
        "used_memory_bytes": proc.get("used_memory_bytes"),
        "kernel_id": kernel_id,
        "notebook": notebook,
        "command": command,
        "user": user,
        "reason": reason,  # why it is no kernel's, where the server says
    }


# -- text --------------------------------------------------------------------------------------


def _checked(server: Server) -> dict[str, Any]:
    """``from_server``, with an answer of the wrong shape (not a jupyter_gpu server) as one line."""
    try:
        return from_server(server)
    except (AttributeError, TypeError, ValueError) as error:
        raise CliError(
            f"{server.url} answered in a shape this jupyter gpu does not know ({error}): "
            "is it a jupyter_gpu server of the same version?"
        ) from None


def run(args: argparse.Namespace) -> int:
    if args.slurm and (args.url or args.no_server or args.token):
        raise CliError(
            "--slurm asks Slurm, not a server: it goes without --url, --token and --no-server", EXIT_USAGE
        )
    if args.slurm:
        return slurm_status.run(args)
    if args.url and args.no_server:
        raise CliError("--url and --no-server contradict each other", EXIT_USAGE)
    if args.token and not args.url:
        raise CliError("--token goes with --url (servers found here bring their own token)", EXIT_USAGE)
    if args.url:
        status = _checked(server_from_url(args.url, args.token or os.environ.get("JUPYTER_TOKEN")))
    elif args.no_server:
        status = from_nvml()
    else:
        server, notes = find_server()
        status = _checked(server) if server else from_nvml()
        status["notes"] += notes
    if args.json:
        print_json(status)
    else:
        print(render(status))
    return EXIT_OK if status["available"] else EXIT_NO_GPU
