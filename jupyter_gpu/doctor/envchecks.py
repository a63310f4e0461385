"""Checks of settings that work on one GPU and bite later: NCCL's environment, synchronous
launches and eager module loading, DataLoader limits (/dev/shm, open files), containers. Each
reads only the environment and the machine (no torch, no CUDA), so it speaks even when torch
cannot be asked.
"""

from __future__ import annotations

import ipaddress

from ..analysis.units import format_bytes
from .check import Check, Status, cuda_build
from .facts import Facts
from .netif import NetInterface, gloo_selects, nccl_selects

OPEN_FILES_MIN = 4096  # below this, many workers with the file_descriptor strategy run out
NOT_FOUND = {"NCCL": "'Bootstrap : no socket interface found'", "gloo": "'Unable to find address for'"}
RESTART = "then restart the kernel (the ranks inherit the kernel's environment)"
SHM_MIN_BYTES = 1 << 30
SHM_FIX = (
    "Give the container more: `docker run --shm-size=8g` (or `--ipc=host`); on Kubernetes mount an "
    "emptyDir with `medium: Memory` at /dev/shm. Or use DataLoader(num_workers=0)."
)


def _set(value: str | None) -> bool:
    """NCCL reads an integer: anything but 0 (and empty) turns the setting on."""
    return bool(value and value.strip() not in ("0", ""))


def multi_node_intended(f: Facts) -> str | None:
    """Why multi-node training looks intended (MASTER_ADDR names another machine), or None."""
    addr = f.env.get("MASTER_ADDR", "").strip()
    if not addr or addr == "localhost":
        return None
    try:
        if ipaddress.ip_address(addr).is_loopback:
            return None
    except ValueError:
        pass  # a host name: assume another machine
    return f"MASTER_ADDR={addr}"


def _ifname_check(f: Facts, var: str, library: str) -> Check | None:
    spec = f.env.get(var)
    if spec is None or not f.interfaces:
        return None
    check_id = var.split("_")[0].lower() + "_ifname"
    by_name = {i.name: i for i in f.interfaces}
    here = ", ".join(f"{i.name} ({'up' if i.up else 'down'})" for i in f.interfaces)
    syntax = (
        "comma-separated name prefixes, `=` first for exact names, `^` first to exclude"
        if library == "NCCL"
        else "exact interface names, comma-separated"
    )
    fix = (
        f"Name an interface that exists, is up and reaches the other nodes (`ip -br addr` lists them; "
        f"{var} takes {syntax}), e.g. `%env {var}=eth0`, or unset it to let {library} choose; {RESTART}."
    )
    if library == "NCCL":
        chosen = nccl_selects(spec, list(by_name))
        missing = [] if chosen else [spec]
    else:  # gloo stops at the first name it cannot find
        chosen = gloo_selects(spec, list(by_name))
        missing = [w.strip() for w in spec.split(",") if w.strip() and w.strip() not in by_name]
    if missing:
        return Check(
            check_id,
            var,
            Status.FAIL,
            f"{var}={spec} names no interface of this machine (here: {here}): {library} cannot start "
            f"a process group ({NOT_FOUND[library]})",
            fix=fix,
        )
    up: list[NetInterface] = [by_name[n] for n in chosen if by_name[n].up]
    if not up:
        return Check(
            check_id,
            var,
            Status.FAIL,
            f"{var}={spec}: {', '.join(chosen)} {'is' if len(chosen) == 1 else 'are'} down, so "
            f"{library} reaches no other process through it",
            fix=fix,
        )
    local = [i for i in up if i.kind != "network"]
    if len(local) < len(up):
        return Check(check_id, var, Status.OK, f"{var}={spec}: {', '.join(i.name for i in up)}")
    kinds = " and ".join(
        sorted({"the loopback interface" if i.kind == "loopback" else "a container bridge" for i in local})
    )
    names = ", ".join(i.name for i in local)
    why = multi_node_intended(f)
    if why:
        return Check(
            check_id,
            var,
            Status.WARN,
            f"{var}={spec} selects only {names} ({kinds}), but {why}: no other node is reached "
            "through it, and the first multi-node collective hangs",
            fix=fix,
        )
    return Check(check_id, var, Status.INFO, f"{var}={spec}: {names} ({kinds}): this machine only")


def check_nccl_ifname(f: Facts) -> Check | None:
    return _ifname_check(f, "NCCL_SOCKET_IFNAME", "NCCL")


def check_gloo_ifname(f: Facts) -> Check | None:
    return _ifname_check(f, "GLOO_SOCKET_IFNAME", "gloo")


_TRANSPORTS = {
    "NCCL_P2P_DISABLE": "GPUs exchange data through host memory instead of NVLink/PCIe peer-to-peer: "
    "a fraction of the bandwidth",
    "NCCL_SHM_DISABLE": "GPUs of one machine that cannot use peer-to-peer go through the network "
    "stack instead of shared memory",
    "NCCL_IB_DISABLE": "InfiniBand/RoCE is not used between nodes: traffic falls back to TCP sockets",
}


def check_nccl_transports(f: Facts) -> Check | None:
    off = [name for name in _TRANSPORTS if _set(f.env.get(name))]
    if not off:
        return None
    listed = ", ".join(f"{n}={f.env[n]}" for n in off)
    unset = " ".join(off)
    return Check(
        "nccl_transports",
        "NCCL transports",
        Status.WARN,
        f"{listed}: {_TRANSPORTS[off[0]]}",
        fix=f"Unless a known hardware or driver problem needs it, unset it (`unset {unset}` in the shell "
        f"that starts Jupyter, or `%env {off[0]}=0`), {RESTART}. `jupyter gpu preflight` shows the bandwidth.",
        detail="\n".join(f"{n}: {_TRANSPORTS[n]}" for n in off),
    )


def check_nccl_debug(f: Facts) -> Check | None:
    level = f.env.get("NCCL_DEBUG", "").strip()
    if level.upper() not in ("INFO", "TRACE"):
        return None
    return Check(
        "nccl_debug",
        "NCCL_DEBUG",
        Status.WARN,
        f"NCCL_DEBUG={level}: every rank prints NCCL's set-up log (dozens of lines each) into the cell"
        + (", and TRACE slows every collective" if level.upper() == "TRACE" else ""),
        fix=f"`%env NCCL_DEBUG=WARN` (or unset it) once the problem it was set for is solved; {RESTART}.",
    )


def check_nccl_errors(f: Facts) -> Check | None:
    name = next(
        (n for n in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING") if n in f.env), None
    )
    blocking = _set(f.env.get("TORCH_NCCL_BLOCKING_WAIT"))
    if name is None or f.env[name].strip() != "0" or blocking:
        return None
    return Check(
        "nccl_errors",
        "NCCL error handling",
        Status.WARN,
        f"{name}=0 and TORCH_NCCL_BLOCKING_WAIT unset: a rank that dies or a collective that times out "
        "leaves the other ranks hanging forever instead of raising an error",
        fix=f"Unset {name} (torch's default, 3, tears the process group down on error), or set "
        f"TORCH_NCCL_BLOCKING_WAIT=1; {RESTART}.",
    )


def check_launch_blocking(f: Facts) -> Check | None:
    if not _set(f.env.get("CUDA_LAUNCH_BLOCKING")):
        return None
    return Check(
        "launch_blocking",
        "CUDA_LAUNCH_BLOCKING",
        Status.WARN,
        f"CUDA_LAUNCH_BLOCKING={f.env['CUDA_LAUNCH_BLOCKING']}: every CUDA kernel launch waits for the "
        "GPU to finish, so the CPU never runs ahead; training steps often take several times as long",
        fix="It is for finding which line raised a CUDA error: unset it (`%env CUDA_LAUNCH_BLOCKING=0` "
        "before CUDA starts, or remove it from the kernel's environment), then restart the kernel.",
    )


def check_module_loading(f: Facts) -> Check | None:
    if not cuda_build(f) or f.env.get("CUDA_MODULE_LOADING", "").upper() != "EAGER":
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


def check_dataloader_shm(f: Facts) -> Check | None:
    """Only when the user stated their DataLoader; check_shm applies the rule of thumb otherwise."""
    plan = f.dataloader
    if plan is None or f.shm is None:
        return None
    need = plan.shm_bytes
    what = (
        f"{plan.workers} workers x {plan.prefetch_factor} batches in flight x {format_bytes(plan.batch_bytes)} "
        f"= {format_bytes(need)} of /dev/shm"
    )
    if need > f.shm.total_bytes:
        return Check(
            "dataloader_shm",
            "DataLoader and /dev/shm",
            Status.FAIL,
            f"{what}, but /dev/shm holds only {format_bytes(f.shm.total_bytes)}: workers die with a "
            "'bus error' (insufficient shared memory)",
            fix=SHM_FIX,
        )
    if need > f.shm.free_bytes:
        return Check(
            "dataloader_shm",
            "DataLoader and /dev/shm",
            Status.WARN,
            f"{what}, but only {format_bytes(f.shm.free_bytes)} of it is free",
            fix="Remove stale files in /dev/shm (crashed workers leave them behind), or use fewer workers.",
        )
    return Check("dataloader_shm", "DataLoader and /dev/shm", Status.OK, f"{what}: fits")


MEMORY_FULL = 0.9  # of the container's limit in use: the next big allocation may be killed


def check_container_memory(f: Facts) -> Check | None:
    """The container's memory limit: what is left of it, and whether the DataLoader's batches in
    /dev/shm (tmpfs: charged to the same limit) fit in it."""
    memory = f.memory_limit
    if memory is None:
        return None
    title = "Container memory limit"
    used = memory.usage_bytes or 0
    left = max(0, memory.limit_bytes - used)
    said = f"the container may use {format_bytes(memory.limit_bytes)}; {format_bytes(used)} is in use"
    fix = (
        "Ask for a larger memory limit (Docker --memory, the pod's resources.limits.memory), or free memory."
    )
    plan = f.dataloader
    if plan is not None and plan.shm_bytes > left:
        return Check(
            "container_memory",
            title,
            Status.WARN,
            f"{said}, and the DataLoader's {format_bytes(plan.shm_bytes)} of batches in /dev/shm count against it: "
            "the out-of-memory killer would end the kernel",
            fix=fix,
        )
    if used > MEMORY_FULL * memory.limit_bytes:
        return Check(
            "container_memory",
            title,
            Status.WARN,
            f"{said}: past {MEMORY_FULL:.0%}, the next large allocation may get the kernel killed",
            fix=fix,
        )
    return Check("container_memory", title, Status.OK, f"{said} ({format_bytes(left)} left)")


def check_open_files(f: Facts) -> Check | None:
    if f.open_files is None:
        return None
    soft, hard = f.open_files
    strategy = f.torch.sharing_strategy
    title = "Open files for DataLoader workers"
    if strategy == "file_system":
        return Check(
            "open_files", title, Status.OK, "sharing strategy file_system: no file descriptor per tensor"
        )
    if soft < 0 or soft >= OPEN_FILES_MIN:
        return Check("open_files", title, Status.OK, f"ulimit -n {'unlimited' if soft < 0 else soft}")
    raise_to = "unlimited" if hard < 0 else hard
    higher = (
        f"`ulimit -n {raise_to}` (the hard limit here) in the shell that starts Jupyter"
        if (hard < 0 or hard > soft)
        else f"ask the administrator for a higher limit (`ulimit -Hn` is {hard})"
    )
    return Check(
        "open_files",
        title,
        Status.WARN,
        f"ulimit -n is {soft}: DataLoader workers pass every tensor of a batch as a file descriptor "
        f"(sharing strategy {strategy or 'file_descriptor'}), and many workers run out: 'Too many open "
        "files' or 'received 0 items of ancdata'",
        fix=f"{higher}, or in the notebook: `torch.multiprocessing.set_sharing_strategy('file_system')`.",
    )


def check_root(f: Facts) -> Check | None:
    if f.euid != 0 or not f.servers:
        return None
    where = f" in a container ({f.container})" if f.container else ""
    return Check(
        "root",
        "Running as root",
        Status.WARN,
        f"the Jupyter server runs as root{where}, started with --allow-root, and so does every "
        "kernel it starts: on a shared host every notebook can read and change everything the "
        "container or machine can, including other users' files and GPU jobs",
        fix="Start Jupyter as an ordinary user: `docker run --user 1000:100 ...` (the Jupyter Docker "
        "stacks' jovyan), a JupyterHub spawner, or `useradd -m student && su - student -c 'jupyter lab'`; "
        "then drop `--allow-root` (`c.ServerApp.allow_root = False`).",
    )


def check_nvidia_smi(f: Facts) -> Check | None:
    gpus_here = bool(f.nvml.devices) or any(n[len("nvidia") :].isdigit() for n in f.dev_nodes)
    if f.nvidia_smi is not None or not gpus_here:
        return None
    caps = f.env.get("NVIDIA_DRIVER_CAPABILITIES")
    return Check(
        "nvidia_smi",
        "nvidia-smi",
        Status.WARN,
        "GPUs are visible here, but nvidia-smi is not on PATH"
        + (
            f" (NVIDIA_DRIVER_CAPABILITIES={caps} leaves out utility)"
            if caps and "utility" not in caps and caps != "all"
            else ""
        ),
        fix="In a container, start it with the utility capability so that the NVIDIA Container Toolkit "
        "mounts nvidia-smi: `docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ...`; "
        "`jupyter gpu status` shows the same figures meanwhile.",
    )
