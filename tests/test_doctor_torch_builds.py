"""%gpu_doctor on torch and its build: a CPU-only build and the pip command that replaces it,
GPUs newer or older than the build's architectures, PTX only, NCCL and cuDNN, TF32, torch missing
or broken, and the CUDA build chosen for a driver. Each failure is constructed through the
doctor's seams and its verdict asserted."""

from __future__ import annotations

from support.doctor_facts import CPU_TORCH, check, healthy, no_cuda

from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.facts import TorchInfo
from jupyter_gpu.doctor.nvmlinfo import NvmlDevice
from jupyter_gpu.doctor.torch_builds import arch_support, choose_build


def test_cpu_only_torch_beside_a_working_driver_names_the_exact_pip_command():
    facts = healthy()
    facts.torch = CPU_TORCH
    report = evaluate(facts)
    assert report.verdict == "No GPU: torch 2.13.0+cpu is a CPU-only build (torch.version.cuda is None)"
    assert report.primary.id == "build" and not report.cuda_ready
    assert (
        "pip install --force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130"
        in report.primary.fix
    )


def test_cpu_only_fix_follows_the_driver_and_brings_torchvision_along():
    facts = healthy()
    facts.torch = CPU_TORCH
    facts.nvml.cuda_driver_version = (12, 8)
    facts.distributions["torchvision"] = "0.28.0+cpu"
    fix = evaluate(facts).primary.fix
    assert (
        "pip install --force-reinstall torch==2.13.0 torchvision --index-url https://download.pytorch.org/whl/cu128"
        in fix
    )


def test_gpu_newer_than_the_build_asks_for_a_newer_cuda_build():
    facts = no_cuda(healthy())
    facts.torch.version, facts.torch.cuda = "2.6.0+cu124", "12.4"
    facts.torch.arch_list = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    facts.torch.available, facts.torch.devices = (
        True,
        [{"name": "NVIDIA GeForce RTX 5090", "capability": [12, 0]}],
    )
    report = evaluate(facts)
    assert report.primary.id == "arch"
    assert report.verdict.endswith(
        "but NVIDIA GeForce RTX 5090 (sm_120) is not supported by torch 2.6.0+cu124"
    )
    assert "whl/cu126" in report.primary.fix


def test_gpu_older_than_the_build_points_at_older_releases():
    facts = healthy()
    facts.torch.available = False
    facts.torch.devices = []
    facts.nvml.devices = [NvmlDevice(index=0, name="Tesla P100", capability=(6, 0))]
    got = check(evaluate(facts), "arch")
    assert got.status is Status.FAIL and "previous-versions" in got.fix


def test_architecture_rules():
    assert arch_support((8, 6), ["sm_80"]) == "native"  # same major, older minor runs
    assert arch_support((9, 0), ["sm_90a"]) == "native"
    assert arch_support((10, 3), ["sm_100a"]) == "none"  # arch-specific code runs on its own arch only
    assert arch_support((10, 0), ["sm_90", "compute_90"]) == "ptx"
    assert arch_support((7, 0), ["sm_75", "sm_80"]) == "none"


def test_ptx_only_is_a_warning_about_slow_first_calls():
    facts = healthy()
    facts.torch.arch_list = ["sm_80", "sm_90", "compute_90"]
    facts.torch.devices = [{"name": "NVIDIA B200", "capability": [10, 0]}]
    got = check(evaluate(facts), "arch")
    assert got.status is Status.WARN and "JIT-compiles PTX" in got.summary


def test_missing_nccl_and_broken_cudnn():
    facts = healthy()
    facts.torch.nccl_available, facts.torch.nccl_version = False, None
    facts.torch.cudnn_error = "cuDNN version incompatibility: PyTorch was compiled against (9, 19, 0) but found runtime version (8, 9, 7). More text."
    report = evaluate(facts)
    assert check(report, "nccl").status is Status.WARN and "gloo" in check(report, "nccl").summary
    cudnn = check(report, "cudnn")
    assert cudnn.status is Status.FAIL and "LD_LIBRARY_PATH" in cudnn.fix
    assert report.primary is cudnn


def test_tf32_is_reported_with_a_hint_on_ampere_and_newer():
    report = evaluate(healthy())
    tf32 = check(report, "tf32")
    assert tf32.status is Status.INFO
    assert tf32.summary == "fp32 matmuls: precision 'highest' (TF32 off); cuDNN convolutions: TF32 on"
    assert "set_float32_matmul_precision('high')" in tf32.fix


def test_torch_missing_or_broken():
    facts = no_cuda(healthy())
    facts.nvml.cuda_driver_version = (12, 6)
    facts.torch = TorchInfo(installed=False, executable="/opt/venv/bin/python")
    del facts.distributions["torch"]
    report = evaluate(facts)
    assert report.verdict == "No GPU: torch is not installed for /opt/venv/bin/python"
    assert "`pip install torch --index-url https://download.pytorch.org/whl/cu126`" in report.primary.fix
    facts.torch = TorchInfo(
        installed=True, import_error="OSError: libcudnn.so.9: cannot open shared object file"
    )
    assert (
        evaluate(facts).verdict
        == "No GPU: `import torch` fails: OSError: libcudnn.so.9: cannot open shared object file"
    )
    facts.torch = TorchInfo(runtime_error="the torch probe did not finish: timed out")
    assert (  # the driver sees the GPUs: never "No GPU" for a torch that could not be asked
        evaluate(facts).verdict
        == "2× NVIDIA H200 found, but could not ask torch: the torch probe did not finish: timed out"
    )


def test_build_choice():
    assert choose_build((2, 13), None) == "cu130"
    assert choose_build((2, 13), (12, 2)) == "cu126"  # minor-version compatibility within CUDA 12
    assert choose_build((2, 7), (12, 8)) == "cu128"
    assert choose_build((2, 9), (11, 8)) is None
