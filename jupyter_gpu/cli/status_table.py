"""``jupyter gpu status`` as text: a table like nvidia-smi's, with each GPU process named by its
notebook, and the notebooks with their kernels' state and memory."""

from __future__ import annotations

from typing import Any

from ..analysis.units import format_bytes, format_bytes_of, format_duration
from .common import format_table, no_gpu_text

SM_NOTE = (
    "(Util: the share of time any kernel ran. SM: the share of SMs busy (GPU performance monitoring, "
    "Hopper on): a loop of tiny kernels reads Util 100% and SM near 0%.)"
)


def _value(value: Any, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f} {unit}"


def _name(gpu: dict[str, Any]) -> str:
    """A GPU's name; a MIG device's profile and instances, under its GPU's row."""
    mig = gpu.get("mig")
    if not isinstance(mig, dict):
        return gpu.get("name") or ""
    return f"└ MIG {mig.get('profile') or '?'} (GI {mig.get('gpu_instance_id')}, CI {mig.get('compute_instance_id')})"


def _gpu_row(gpu: dict[str, Any]) -> list[str]:
    if gpu["state"] != "ok":
        return [str(gpu["index"]), _name(gpu), gpu["state"].upper(), "", gpu.get("error") or "", "", ""]
    used, total = gpu.get("memory_used_bytes"), gpu.get("memory_total_bytes")
    memory = format_bytes_of(used, total) + (f" ({used / total:.0%})" if used is not None and total else "")
    if isinstance(gpu.get("mig"), dict):  # utilisation, temperature and power are its GPU's
        return [str(gpu["index"]), _name(gpu), "", "", memory, "", ""]
    limit = gpu.get("power_limit_watts")
    return [
        str(gpu["index"]),
        _name(gpu),
        _value(gpu.get("utilization_gpu_percent"), "%"),
        _value(gpu.get("sm_active_percent"), "%"),
        memory,
        _value(gpu.get("temperature_celsius"), "C"),
        _value(gpu.get("power_watts"), "W") + ("" if limit is None else f" / {limit:.0f} W"),
    ]


def _owner(proc: dict[str, Any]) -> str:
    if proc["kernel_id"]:
        where = proc["notebook"] or "a kernel with no notebook"
        return f"{where} (kernel {proc['kernel_id'][:8]})"
    if proc["command"]:
        return proc["command"][:100] + (f" [{proc['user']}]" if proc["user"] else "")
    if proc.get("reason"):
        return f"not visible from here: {proc['reason']}"
    return "not visible from here (another user, container or PID namespace)"


def _kernel_row(kernel: dict[str, Any]) -> list[str]:
    held = ", ".join(
        f"{format_bytes(r['used_memory_bytes'])} on GPU {r['gpu_index']}" for r in kernel["gpu_memory"]
    )
    report = kernel["allocator"]
    state, reason = kernel["allocator_state"], kernel["allocator_reason"]
    if report is None and state not in (None, "no_stats") and reason:
        allocator = f"refused: {reason}" if state == "refused" else reason
    elif report is None:
        allocator = "not reported (%load_ext jupyter_gpu in it)"
    elif not report["cuda_in_use"]:
        allocator = "no CUDA in use"
    else:
        allocator = (
            "; ".join(
                f"GPU {d['index']}: {format_bytes(d['allocated_bytes'])} / {format_bytes(d['reserved_bytes'])}"
                for d in report["devices"]
            )
            or "nothing allocated"
        )
    state = kernel["execution_state"] or ""
    if kernel["idle_seconds"] is not None:
        state = f"idle {format_duration(kernel['idle_seconds'])}"
    return [
        kernel["notebook"] or "(no notebook)",
        (kernel["id"] or "")[:8],
        state + (" IDLE HOLDER" if kernel["idle_holding"] else ""),
        held or "none",
        allocator,
    ]


def render(status: dict[str, Any]) -> str:
    source = status["source"]
    where = f"from {source['url']}" if source["url"] else "from NVML on this machine"
    if source["simulated"]:
        where += ", SIMULATED readings"
    if not status["available"]:
        return no_gpu_text(where, status["reason"], status["problem"])
    driver = f"driver {status['driver_version']}, CUDA {status['cuda_driver_version']}"
    lines = [f"GPUs {where}; {driver}", ""]
    lines += format_table(
        ["GPU", "Name", "Util", "SM", "Memory used / total", "Temp", "Power / limit"],
        [_gpu_row(g) for g in status["gpus"]],
        [True, False, True, True, True, True, True],
    )
    if any(g.get("state") == "ok" and g.get("mig") is None for g in status["gpus"]):
        lines.append(SM_NOTE)
    lines += ["", "Processes"]
    if status["processes"]:
        lines += format_table(
            ["GPU", "PID", "Memory", "Notebook or command"],
            [
                [str(p["gpu_index"]), str(p["pid"]), format_bytes(p["used_memory_bytes"]), _owner(p)]
                for p in status["processes"]
            ],
            [True, True, True, False],
        )
    else:
        lines.append("none")
    if status["hidden_processes"]:
        lines.append(
            f"(+{status['hidden_processes']} process(es) of other users, not shown: "
            "c.GPUMonitor.show_all_users = True shows them)"
        )
    if status["kernels"] is not None:
        lines += ["", "Notebooks"]
        if status["kernels"]:
            lines += format_table(
                ["Notebook", "Kernel", "State", "GPU memory", "PyTorch allocated / reserved"],
                [_kernel_row(k) for k in status["kernels"]],
                [False] * 5,
            )
            if any(k["idle_holding"] for k in status["kernels"]):
                idle = status["idle"]
                lines.append(
                    f"IDLE HOLDER: idle at least {format_duration(idle['after_seconds'])} while holding at "
                    f"least {format_bytes(idle['min_memory_bytes'])} of GPU memory; free its cache or shut "
                    "it down from the GPU panel."
                )
        else:
            lines.append("no kernels running")
    else:
        lines += ["", "(no Jupyter server asked, so no notebooks: pass --url to name one)"]
    lines += status["notes"]
    return "\n".join(lines)
