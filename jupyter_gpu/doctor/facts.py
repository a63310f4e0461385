"""Everything the doctor looks at, gathered once, so that the checks themselves stay pure.

Each source is a seam (an environment mapping, a root directory for /proc and /dev, callables for
NVML, torch, /dev/shm, installed distributions and running servers), so tests and other callers
(the server, a CLI) can substitute any of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from .. import container_limits
from ..torch_state import torch_in_use
from . import probe
from .netif import NetInterface, read_interfaces
from .nvmlinfo import NvmlInfo, read_nvml
from .servers import ServerProbe, probe_servers

# Distributions whose presence or absence is a finding (or goes into a fix's pip command).
WATCHED_DISTRIBUTIONS = ("torch", "torchvision", "torchaudio", "nvidia-ml-py", "pynvml", "nvidia-ml-py3")
PROBE_TIMEOUT_S = 90.0
# The only variables the checks read; the rest of the environment (tokens, keys) stays out of
# reports, which end up in notebooks, logs and the sidebar.
RELEVANT_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_MODULE_LOADING",
    "NVIDIA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "CUDA_LAUNCH_BLOCKING",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_DEBUG",
    "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_ASYNC_ERROR_HANDLING",  # the name before torch 2.2
    "MASTER_ADDR",  # set to another machine: multi-node training is intended
)


@dataclass
class TorchInfo:
    """torch's own view; see probe.py. Runtime fields stay None when nobody asked CUDA."""

    installed: bool | None = None  # None: the probe could not tell
    executable: str | None = None
    import_error: str | None = None
    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    arch_list: list[str] = field(default_factory=list)
    matmul_precision: str | None = None
    cudnn_allow_tf32: bool | None = None
    cuda_initialized: bool = False
    cudnn_available: bool | None = None
    cudnn_version: int | None = None
    cudnn_error: str | None = None
    distributed_available: bool | None = None
    nccl_available: bool | None = None
    nccl_version: str | None = None
    runtime_probed: bool = False
    runtime_error: str | None = None
    available: bool | None = None
    device_count: int | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    init_warnings: list[str] = field(default_factory=list)
    sharing_strategy: str | None = None  # torch.multiprocessing's, how DataLoader workers hand over tensors
    source: str = "kernel"  # where the runtime facts came from: "kernel" or "subprocess"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TorchInfo:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class ShmInfo:
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class MemoryLimit:
    """The container's memory limit over this process (its cgroup's, tightest on the way up)."""

    limit_bytes: int
    usage_bytes: int | None


@dataclass(frozen=True)
class DataLoaderPlan:
    """What the user says their DataLoader will do, for the /dev/shm estimate."""

    workers: int
    batch_bytes: int
    prefetch_factor: int = 2  # DataLoader's default: batches each worker keeps ready

    @property
    def shm_bytes(self) -> int:
        """Batches in flight through /dev/shm at once."""
        return self.workers * self.prefetch_factor * self.batch_bytes

    @classmethod
    def stated(cls, workers: int | None, batch_mib: float | None) -> DataLoaderPlan | None:
        """From ``--workers`` and ``--batch-mib``; ValueError says what is wrong with them."""
        if workers is None and batch_mib is None:
            return None
        if workers is None or batch_mib is None:
            raise ValueError("--workers and --batch-mib go together (workers, and MiB per batch)")
        if workers < 1 or not 0 < batch_mib < 2**30:
            raise ValueError("--workers must be at least 1 and --batch-mib a positive size in MiB")
        return cls(workers, int(batch_mib * 2**20))


@dataclass
class Facts:
    env: dict[str, str]  # only RELEVANT_ENV
    torch: TorchInfo
    nvml: NvmlInfo
    driver_proc: str | None = None  # first line of /proc/driver/nvidia/version
    dev_nodes: list[str] = field(default_factory=list)
    shm: ShmInfo | None = None
    distributions: dict[str, str] = field(default_factory=dict)
    servers: list[ServerProbe] | None = None  # None: not looked for
    interfaces: list[NetInterface] = field(default_factory=list)
    open_files: tuple[int, int] | None = None  # RLIMIT_NOFILE (soft, hard); -1 is unlimited
    euid: int | None = None
    container: str | None = None  # what says this runs in a container, e.g. "/.dockerenv"
    nvidia_smi: str | None = None  # its path on PATH
    dataloader: DataLoaderPlan | None = None
    memory_limit: MemoryLimit | None = None  # None: no limit, or none readable


def _child_facts(env: Mapping[str, str], python: str) -> dict[str, Any]:
    """Run probe.py in a fresh interpreter with the given environment."""
    code = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
    # `python -c` puts its working directory first on sys.path: started in a directory another
    # user can write (/tmp, a shared course folder), a json.py planted there would run as us.
    try:
        with tempfile.TemporaryDirectory(prefix="jupyter_gpu-doctor-") as private:
            done = subprocess.run(
                [python, "-c", code, probe.__file__],
                env=dict(env),
                cwd=private,
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
            )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"runtime_error": f"the torch probe did not finish: {error}"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"runtime_error": f"the torch probe failed (exit {done.returncode}): {tail}"}
    return {**json.loads(lines[-1]), "source": "subprocess"}


def read_torch(
    env: Mapping[str, str], allow_cuda_init: bool = False, python: str = sys.executable
) -> TorchInfo:
    """torch's facts without initialising CUDA in this process, unless it already is (or may be).

    Build facts and settings come from this process when torch is imported here (the user may
    have changed TF32 flags); whether CUDA works comes from a child process unless CUDA is
    already initialised here or ``allow_cuda_init`` says the caller is about to do it anyway.
    """
    if allow_cuda_init or torch_in_use() is not None:
        return TorchInfo.from_dict(probe.torch_facts(runtime=True))
    torch = sys.modules.get("torch")
    child = _child_facts(env, python)
    if torch is None:
        return TorchInfo.from_dict(child)
    runtime = (
        "cudnn_available",
        "cudnn_version",
        "cudnn_error",
        "runtime_probed",
        "runtime_error",
        "available",
        "device_count",
        "devices",
        "init_warnings",
        "source",
    )
    return TorchInfo.from_dict(probe.build_facts(torch) | {k: child[k] for k in runtime if k in child})


def read_memory_limit() -> MemoryLimit | None:
    found = container_limits.memory_cgroup()
    if isinstance(found, str):
        return None
    limit = found.limit_bytes()
    return None if limit is None else MemoryLimit(limit, found.usage_bytes())


def read_shm(path: str = "/dev/shm") -> ShmInfo | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return ShmInfo(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def read_open_files() -> tuple[int, int] | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def read_container(root: Path) -> str | None:
    """The marker that says this runs in a container, or None."""
    for marker in ("/.dockerenv", "/run/.containerenv"):
        if (root / marker.lstrip("/")).exists():
            return marker
    try:
        cgroup = (root / "proc/1/cgroup").read_text()
    except OSError:
        return None
    found = next((w for w in ("kubepods", "docker", "containerd", "libpod", "lxc") if w in cgroup), None)
    return f"/proc/1/cgroup names {found}" if found else None


def read_distributions(names: tuple[str, ...] = WATCHED_DISTRIBUTIONS) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def read_driver_proc(root: Path) -> str | None:
    try:
        text = (root / "proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    return text.splitlines()[0].strip() if text.strip() else None


def gather(
    env: Mapping[str, str] | None = None,
    *,
    allow_cuda_init: bool = False,
    check_server: bool = True,
    root: Path = Path("/"),
    nvml_reader: Callable[[], NvmlInfo] = read_nvml,
    torch_reader: Callable[[Mapping[str, str]], TorchInfo] | None = None,
    shm_reader: Callable[[], ShmInfo | None] | None = None,
    distributions_reader: Callable[[], dict[str, str]] = read_distributions,
    servers_reader: Callable[[], list[ServerProbe] | None] = probe_servers,
    interfaces_reader: Callable[[], list[NetInterface]] = read_interfaces,
    dataloader: DataLoaderPlan | None = None,
    memory_reader: Callable[[], MemoryLimit | None] = read_memory_limit,
) -> Facts:
    """Collect every fact once. Takes a few seconds when torch has to be asked in a child."""
    env = dict(os.environ if env is None else env)
    torch_info = torch_reader(env) if torch_reader else read_torch(env, allow_cuda_init=allow_cuda_init)
    return Facts(
        env={k: env[k] for k in RELEVANT_ENV if k in env},
        torch=torch_info,
        nvml=nvml_reader(),
        driver_proc=read_driver_proc(root),
        dev_nodes=sorted(p.name for p in (root / "dev").glob("nvidia*")),
        shm=shm_reader() if shm_reader else read_shm(str(root / "dev/shm")),
        distributions=distributions_reader(),
        servers=servers_reader() if check_server else None,
        interfaces=interfaces_reader(),
        open_files=read_open_files(),
        euid=os.geteuid() if hasattr(os, "geteuid") else None,
        container=read_container(root),
        nvidia_smi=shutil.which("nvidia-smi", path=env.get("PATH")),
        dataloader=dataloader,
        memory_limit=memory_reader(),
    )
