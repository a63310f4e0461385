"""%gpu_doctor on the driver and the GPUs it shows: a healthy H200 machine, no driver, a kernel
module without its libraries, NVML's failures, a driver too old for torch's CUDA,
CUDA_VISIBLE_DEVICES against the GPUs NVML sees, ECC errors and MIG. Each failure is constructed
through the doctor's seams and its verdict asserted."""

from __future__ import annotations

import pytest
from support.doctor_facts import CPU_TORCH, check, healthy, no_cuda

from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.facts import gather
from jupyter_gpu.doctor.nvmlinfo import NvmlInfo


def test_healthy_h200_is_ready_with_every_check_passing():
    report = evaluate(healthy())
    assert report.verdict == "CUDA ready: 2× NVIDIA H200, torch 2.11.0+cu130, driver 580.159.04"
    assert report.cuda_ready and report.primary is None
    assert {c.status for c in report.checks} <= {Status.OK, Status.INFO}
    assert check(report, "driver").summary == "driver 580.159.04 (CUDA 13.0): 2× NVIDIA H200"
    assert check(report, "cudnn").summary.startswith("cuDNN 9.19.0")
    assert check(report, "nccl").summary == "NCCL 2.28.9"
    assert check(report, "arch").summary.startswith("sm_90 is in torch's build")


def test_no_driver_at_all_is_the_verdict_and_the_cpu_build_only_a_warning():
    facts = healthy()
    facts.torch = CPU_TORCH
    facts.nvml = NvmlInfo(error_kind="library_not_found", error="NVML Shared Library Not Found")
    facts.driver_proc, facts.dev_nodes = None, []
    report = evaluate(facts)
    assert report.verdict == (
        "No GPU: no NVIDIA driver found: NVIDIA's management library (libnvidia-ml.so.1) "
        "is not on this machine"
    )
    assert "--gpus all" in report.primary.fix
    assert check(report, "build").status is Status.WARN
    assert not any(c.id in ("ecc", "mig", "visible_devices") for c in report.checks)


def test_kernel_module_without_libraries_points_at_the_container_runtime(tmp_path):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 2025\nGCC version: gcc 12\n"
    )
    (tmp_path / "dev/shm").mkdir(parents=True)
    facts = gather(
        {"API_TOKEN": "secret", "CUDA_VISIBLE_DEVICES": "0"},
        root=tmp_path,
        check_server=False,
        nvml_reader=lambda: NvmlInfo(error_kind="library_not_found", error="NVML Shared Library Not Found"),
        torch_reader=lambda env: CPU_TORCH,
        distributions_reader=lambda: {"nvidia-ml-py": "13.615.71"},
    )
    assert facts.env == {"CUDA_VISIBLE_DEVICES": "0"}  # reports carry no unrelated variables
    report = evaluate(facts)
    assert report.verdict.startswith("No GPU: kernel module 580.159.04 is loaded, but the driver's libraries")
    assert "NVIDIA Container Toolkit" in report.primary.fix


@pytest.mark.parametrize(
    ("kind", "words", "fix"),
    [
        ("driver_not_loaded", "installed but not loaded", "modprobe nvidia"),
        ("version_mismatch", "different versions", "Reboot"),
        ("no_permission", "no permission to open /dev/nvidia*", "video"),
    ],
)
def test_nvml_failures_each_have_their_own_fix(kind, words, fix):
    facts = no_cuda(healthy())
    facts.nvml = NvmlInfo(error_kind=kind, error="from NVML")
    report = evaluate(facts)
    assert report.primary.id == "driver" and words in report.verdict and fix in report.primary.fix


def test_driver_older_than_torchs_cuda_names_the_minimum_driver_and_the_matching_build():
    facts = no_cuda(
        healthy(),
        "CUDA initialization: The NVIDIA driver on your system is too old (found version "
        "12080). Please update your GPU driver by downloading and installing a new version "
        "from the URL: http://www.nvidia.com/Download/index.aspx (Triggered internally at x)",
    )
    facts.nvml.driver_version, facts.nvml.cuda_driver_version = "570.86.15", (12, 8)
    report = evaluate(facts)
    assert (
        report.verdict
        == "No GPU: driver 570.86.15 (CUDA 12.8) is too old for torch 2.11.0+cu130, built for CUDA 13.0"
    )
    assert "Upgrade the NVIDIA driver to 580 or newer" in report.primary.fix
    assert "https://download.pytorch.org/whl/cu128" in report.primary.fix
    assert (
        check(report, "cuda").summary
        == "False: The NVIDIA driver on your system is too old (found version 12080)."
    )


def test_older_minor_version_of_the_driver_is_only_information():
    facts = healthy()
    facts.torch.version, facts.torch.cuda = "2.11.0+cu128", "12.8"
    facts.nvml.cuda_driver_version = (12, 4)
    report = evaluate(facts)
    assert report.cuda_ready and check(report, "driver_cuda").status is Status.INFO
    assert "minor-version compatibility" in check(report, "driver_cuda").summary


def test_empty_cuda_visible_devices_hides_every_gpu():
    facts = no_cuda(healthy())
    facts.env["CUDA_VISIBLE_DEVICES"] = ""
    report = evaluate(facts)
    assert report.verdict == "No GPU: CUDA_VISIBLE_DEVICES is set to an empty string, so CUDA sees no GPU"
    assert "%env CUDA_VISIBLE_DEVICES=0" in report.primary.fix


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        ("3", Status.FAIL, "selects no GPU: there is no GPU 3 (this machine has 2)"),
        ("abc", Status.FAIL, "'abc' is neither a GPU index nor a UUID"),
        ("GPU-ffff", Status.FAIL, "no GPU's UUID starts with 'GPU-ffff'"),
        ("0,7,1", Status.WARN, "CUDA uses only 0, because there is no GPU 7"),
        ("1,-1,0", Status.WARN, "'-1' hides every entry after it"),
        ("GPU-2da622ba,1", Status.OK, "2 selected"),
    ],
)
def test_cuda_visible_devices_is_checked_against_the_gpus_nvml_sees(value, status, words):
    facts = healthy()
    facts.env["CUDA_VISIBLE_DEVICES"] = value
    if status is Status.FAIL:
        no_cuda(facts)
    got = check(evaluate(facts), "visible_devices")
    assert got.status is status and words in got.summary


def test_uncorrected_ecc_errors_fail_even_when_cuda_works():
    facts = healthy()
    facts.nvml.devices[1].ecc_uncorrected = 3
    report = evaluate(facts)
    assert report.cuda_ready
    assert report.verdict.endswith(
        "; but GPU 1 (NVIDIA H200): 3 uncorrected ECC errors since the driver loaded"
    )
    assert "nvidia-smi -r -i 1" in report.primary.fix


def test_mig_on_is_explained_and_a_pending_change_warned():
    facts = healthy()
    facts.nvml.devices[0].mig_current = facts.nvml.devices[0].mig_pending = True
    got = check(evaluate(facts), "mig")
    assert got.status is Status.INFO and "MIG-<uuid>" in got.fix
    facts.nvml.devices[1].mig_pending = True
    got = check(evaluate(facts), "mig")
    assert got.status is Status.WARN and "GPU 1: a MIG mode change is pending" == got.summary
