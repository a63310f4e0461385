"""The checklist: every check, in order.

Order matters: it is the order of the report, and the first failing check, reading from the
top, becomes the report's verdict, so the root causes (no torch, no driver, a CPU-only build, an
allocator setting torch stops at) come before their consequences (``is_available()`` is False).
"""

from __future__ import annotations

from collections.abc import Callable

from . import driver_checks as d
from . import envchecks as e
from . import server_checks as s
from . import torch_checks as t
from .alloc_conf import check_alloc_conf
from .check import Check
from .facts import Facts

CHECKS: tuple[Callable[[Facts], Check | None], ...] = (
    t.check_torch,
    d.check_driver,
    t.check_build,
    t.check_driver_cuda,
    d.check_visible_devices,
    t.check_arch,
    check_alloc_conf,
    t.check_cuda,
    d.check_ecc,
    d.check_mig,
    t.check_cudnn,
    t.check_nccl,
    e.check_nccl_ifname,
    e.check_gloo_ifname,
    e.check_nccl_transports,
    e.check_nccl_errors,
    e.check_nccl_debug,
    e.check_launch_blocking,
    t.check_tf32,
    e.check_module_loading,
    e.check_shm,
    e.check_dataloader_shm,
    e.check_container_memory,
    e.check_open_files,
    d.check_nvml_package,
    e.check_nvidia_smi,
    s.check_server,
    s.check_server_auth,
    s.check_server_tls,
    s.check_server_origin,
    s.check_server_xsrf,
    e.check_root,
)


def run_checks(facts: Facts) -> list[Check]:
    return [c for c in (check(facts) for check in CHECKS) if c is not None]
