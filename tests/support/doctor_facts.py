"""What the doctor is given to judge, made by hand: the facts of a healthy two-H200 machine (as
its NVML answered, tests/fixtures/nvml_readings_2gpu.json), a CPU-only torch, a CUDA that does
not start; and how one check is found in a report."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jupyter_gpu.doctor.facts import Facts, ShmInfo, TorchInfo
from jupyter_gpu.doctor.nvmlinfo import NvmlDevice, NvmlInfo
from jupyter_gpu.doctor.servers import ServerProbe
from support.paths import READINGS

H200 = json.loads(READINGS.read_text())  # what NVML answered on the H200 machine
CU130_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
CPU_TORCH = TorchInfo(
    installed=True,
    executable="/usr/bin/python3",
    version="2.13.0+cpu",
    cuda=None,
    matmul_precision="highest",
    cudnn_allow_tf32=True,
)


def h200_nvml() -> NvmlInfo:
    """NVML as the H200 machine answered (tests/fixtures/nvml_readings_2gpu.json)."""
    return NvmlInfo(
        driver_version=H200["driver_version"],
        cuda_driver_version=(
            H200["cuda_driver_version"] // 1000,
            H200["cuda_driver_version"] % 1000 // 10,
        ),
        devices=[
            NvmlDevice(
                index=d["index"],
                name=d["name"],
                uuid=d["uuid"],
                capability=(9, 0),
                mig_current=bool(d["mig_mode"][0]),
                mig_pending=bool(d["mig_mode"][1]),
                ecc_uncorrected=d["ecc_volatile_uncorrected"],
            )
            for d in H200["devices"]
        ],
    )


def healthy() -> Facts:
    """A machine where everything works: two H200s, a CUDA 13.0 build of torch that uses them."""
    torch = TorchInfo(
        installed=True,
        executable="/usr/bin/python3",
        version="2.11.0+cu130",
        cuda="13.0",
        arch_list=list(CU130_ARCHS),
        matmul_precision="highest",
        cudnn_allow_tf32=True,
        cudnn_available=True,
        cudnn_version=91900,
        distributed_available=True,
        nccl_available=True,
        nccl_version="2.28.9",
        runtime_probed=True,
        available=True,
        device_count=2,
        devices=[{"name": "NVIDIA H200", "capability": [9, 0]}] * 2,
        source="subprocess",
    )
    return Facts(
        env={},
        torch=torch,
        nvml=h200_nvml(),
        driver_proc="NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04",
        dev_nodes=["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"],
        shm=ShmInfo(64 << 30, 60 << 30),
        distributions={"torch": "2.11.0+cu130", "nvidia-ml-py": "13.610.43"},
        servers=[ServerProbe("http://localhost:8888/api/gpu/devices", status=200)],
        nvidia_smi="/usr/bin/nvidia-smi",
    )


def no_cuda(facts: Facts, *warnings: str, count: int = 0) -> Facts:
    """What torch says when CUDA does not start: is_available() False, and maybe a warning."""
    facts.torch = dataclasses.replace(
        facts.torch, available=False, device_count=count, devices=[], init_warnings=list(warnings)
    )
    return facts


def check(report: Any, id_: str) -> Any:
    """The check of that id in a report."""
    return next(c for c in report.checks if c.id == id_)
