"""The checklist: every check, in order.

Order matters: it is the order of the report, and the first failing check, reading from the
top, becomes the report's verdict, so the root causes (no torch, no driver, a CPU-only build, an
allocator setting torch stops at) come before their consequences (``is_available()`` is False).
"""

from __future__ import annotations

from collections.abc import Callable

from . import checks as c
from . import envchecks as e
from . import exposure as x
from .checks import Check
from .facts import Facts

CHECKS: tuple[Callable[[Facts], Check | None], ...] = (
    c.check_torch,
    c.check_driver,
    c.check_build,
    c.check_driver_cuda,
    c.check_visible_devices,
    c.check_arch,
    c.check_alloc_conf,
    c.check_cuda,
    c.check_ecc,
    c.check_mig,
    c.check_cudnn,
    c.check_nccl,
    e.check_nccl_ifname,
    e.check_gloo_ifname,
    e.check_nccl_transports,
    e.check_nccl_errors,
    e.check_nccl_debug,
    e.check_launch_blocking,
    c.check_tf32,
    c.check_module_loading,
    c.check_shm,
    e.check_dataloader_shm,
    e.check_open_files,
    c.check_nvml_package,
    e.check_nvidia_smi,
    c.check_server,
    x.check_server_auth,
    x.check_server_tls,
    x.check_server_origin,
    x.check_server_xsrf,
    e.check_root,
)


def run_checks(facts: Facts) -> list[Check]:
    return [c for c in (check(facts) for check in CHECKS) if c is not None]
