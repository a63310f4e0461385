"""%gpu_doctor: each failure is constructed through the doctor's seams and its verdict asserted."""

from __future__ import annotations

import dataclasses
import http.server
import json
import socket
import threading

import pytest
from support.doctor_facts import CPU_TORCH, check, healthy, no_cuda
from support.imports import modules_after

from jupyter_gpu.client import Server
from jupyter_gpu.doctor import Status, diagnose, evaluate
from jupyter_gpu.doctor.alloc_conf import parse_alloc_conf
from jupyter_gpu.doctor.facts import DataLoaderPlan, MemoryLimit, ShmInfo, TorchInfo, gather, read_torch
from jupyter_gpu.doctor.nvmlinfo import NvmlDevice, NvmlInfo
from jupyter_gpu.doctor.servers import ServerProbe, probe_servers
from jupyter_gpu.doctor.torch_builds import arch_support, choose_build

# -- the whole report ---------------------------------------------------------------------------


def test_healthy_h200_is_ready_with_every_check_passing():
    report = evaluate(healthy())
    assert report.verdict == "CUDA ready: 2× NVIDIA H200, torch 2.11.0+cu130, driver 580.159.04"
    assert report.cuda_ready and report.primary is None
    assert {c.status for c in report.checks} <= {Status.OK, Status.INFO}
    assert check(report, "driver").summary == "driver 580.159.04 (CUDA 13.0): 2× NVIDIA H200"
    assert check(report, "cudnn").summary.startswith("cuDNN 9.19.0")
    assert check(report, "nccl").summary == "NCCL 2.28.9"
    assert check(report, "arch").summary.startswith("sm_90 is in torch's build")


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


@pytest.mark.parametrize(
    ("value", "status", "words"),
    [
        ("expandable_segments:True", Status.OK, "expandable_segments:True"),
        (
            "roundup_power2_divisions:[256:1,512:2,>:4],max_split_size_mb:128",
            Status.OK,
            "max_split_size_mb:128",
        ),
        (
            "max_split_size_mb:10",
            Status.FAIL,
            "max_split_size_mb:10 must be a whole number of MiB, at least 20",
        ),
        ("garbage_collection_threshold:1.5", Status.FAIL, "strictly between 0 and 1"),
        ("backend:cudaMalloc", Status.FAIL, "must be native or cudaMallocAsync"),
        ("expandable_segments", Status.FAIL, "has no value"),
        ("expandable_segments:true", Status.WARN, "must be True or False"),
        (
            "garbage_collection_threshold:0.6",
            Status.WARN,
            "only acts when a per-process memory fraction is set",
        ),
        ("backend:cudaMallocAsync,max_split_size_mb:128", Status.WARN, "cudaMallocAsync ignores"),
        ("max_split_mb:128", Status.FAIL, "'max_split_mb' is not an allocator option"),
        ("bogus_option:1", Status.FAIL, "'bogus_option' is not an allocator option"),
    ],
)
def test_allocator_config_is_parsed_as_torch_would(value, status, words):
    facts = healthy()
    facts.env["PYTORCH_CUDA_ALLOC_CONF"] = value
    got = check(evaluate(facts), "alloc_conf")
    assert got.status is status and words in got.summary


def test_two_allocator_variables_that_disagree():
    facts = healthy()
    facts.env.update(
        PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", PYTORCH_ALLOC_CONF="max_split_size_mb:64"
    )
    assert check(evaluate(facts), "alloc_conf").status is Status.WARN


def test_allocator_parser_keeps_bracketed_lists_whole():
    options, errors, doubts = parse_alloc_conf(
        "roundup_power2_divisions:[64:8,>:1], expandable_segments:True"
    )
    assert options == {"roundup_power2_divisions": "[64:8,>:1]", "expandable_segments": "True"}
    assert errors == doubts == []


def test_eager_module_loading_is_warned():
    facts = healthy()
    facts.env["CUDA_MODULE_LOADING"] = "EAGER"
    report = evaluate(facts)
    assert check(report, "module_loading").status is Status.WARN
    assert report.verdict.endswith("(1 warning)")


def test_small_or_missing_dev_shm():
    facts = healthy()
    facts.shm = ShmInfo(64 << 20, 64 << 20)  # Docker's default
    got = check(evaluate(facts), "shm")
    assert got.status is Status.WARN and "only 64.0 MiB" in got.summary and "--shm-size" in got.fix
    facts.shm = None
    assert check(evaluate(facts), "shm").status is Status.WARN


def test_the_containers_memory_limit_and_the_dataloader_batches_it_must_hold():
    facts = healthy()
    assert all(c.id != "container_memory" for c in evaluate(facts).checks)  # no limit: nothing to say
    facts.memory_limit = MemoryLimit(16 << 30, 4 << 30)
    got = check(evaluate(facts), "container_memory")
    assert got.status is Status.OK and "16.0 GiB" in got.summary and "12.0 GiB left" in got.summary
    facts.dataloader = DataLoaderPlan(workers=8, batch_bytes=1 << 30)  # 16 GiB of batches in /dev/shm
    got = check(evaluate(facts), "container_memory")
    assert got.status is Status.WARN and "16.0 GiB of batches in /dev/shm count against it" in got.summary
    facts.dataloader = None
    facts.memory_limit = MemoryLimit(16 << 30, 15 << 30)
    got = check(evaluate(facts), "container_memory")
    assert got.status is Status.WARN and "past 90%" in got.summary and "--memory" in got.fix


def test_stray_pynvml_distribution_beside_nvidia_ml_py():
    facts = healthy()
    facts.distributions["pynvml"] = "12.0.0"
    got = check(evaluate(facts), "nvml_package")
    assert got.status is Status.WARN
    assert got.fix == "`pip uninstall -y pynvml && pip install --force-reinstall nvidia-ml-py`"


@pytest.mark.parametrize(
    ("servers", "status", "words"),
    [
        ([ServerProbe("http://h/api/gpu/devices", status=404)], Status.WARN, "no GPU routes"),
        ([ServerProbe("http://h/api/gpu/devices", status=403)], Status.WARN, "refused this kernel's token"),
        (
            [ServerProbe("http://h/api/gpu/devices", error="Connection refused")],
            Status.WARN,
            "Connection refused",
        ),
        ([], Status.INFO, "no running Jupyter server"),
    ],
)
def test_server_extension_reachability(servers, status, words):
    facts = healthy()
    facts.servers = servers
    got = check(evaluate(facts), "server")
    assert got.status is status and words in got.summary


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


# -- rendering ----------------------------------------------------------------------------------


def test_text_html_and_json_forms():
    facts = healthy()
    facts.torch = CPU_TORCH
    facts.env["PYTORCH_CUDA_ALLOC_CONF"] = "<script>"
    report = evaluate(facts)
    text = str(report)
    assert text.splitlines()[0] == report.verdict
    assert "[FAIL] torch CUDA build: torch 2.13.0+cpu is a CPU-only build" in text
    assert "       fix: Install a CUDA build: `pip install" in text
    html = report.as_report().html()
    assert "<table>" in html and "FAIL" in html and "<script>" not in html
    data = json.loads(report.to_json())
    assert data["verdict"] == report.verdict and data["cuda_ready"] is False and data["primary"] == "build"
    assert {"id": "build", "status": "fail"}.items() <= data["checks"][2].items()
    assert data["facts"]["torch"]["version"] == "2.13.0+cpu"


# -- gathering: real sources, never CUDA in this process ----------------------------------------


def test_this_machine_has_no_driver_and_the_doctor_says_so():
    """No GPU here: NVML's library is absent; torch is asked in a child, never in this process."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this test describes a machine without a GPU")
    report = diagnose(check_server=False)
    assert not report.cuda_ready
    assert report.verdict.startswith("No GPU: ")
    assert check(report, "torch").status is Status.OK


def test_diagnosing_never_asks_cuda_in_this_process(monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("CUDA is already initialised in this process")

    def forbidden(*args, **kwargs):
        raise AssertionError("the doctor asked CUDA inside the kernel")

    for name in (
        "is_available",
        "device_count",
        "get_device_capability",
        "get_device_properties",
        "init",
        "_lazy_init",
        "current_device",
        "mem_get_info",
    ):
        monkeypatch.setattr(torch.cuda, name, forbidden)
    info = read_torch(dict(__import__("os").environ, CUDA_VISIBLE_DEVICES=""))
    assert info.source == "subprocess" and info.runtime_probed
    assert info.available is False and info.device_count == 0
    assert info.version == torch.__version__  # build facts read here
    assert not torch.cuda.is_initialized()


def test_the_torch_probe_ignores_modules_planted_in_the_working_directory(tmp_path, monkeypatch):
    """`jupyter gpu doctor` run from /tmp: the probe's `python -c` put the working directory first
    on sys.path, and another user's json.py there ran as the caller."""
    marker = tmp_path / "marker"
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "json.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran as you')\nraise SystemExit(0)\n"
    )
    monkeypatch.chdir(tmp_path / "shared")
    info = read_torch(dict(__import__("os").environ))
    assert not marker.exists()
    assert info.source == "subprocess" and info.runtime_error is None


def test_probe_failure_is_reported_not_raised(tmp_path):
    pytest.importorskip("torch")  # imported here: build facts come from this process, runtime from the child
    info = read_torch({}, python=str(tmp_path / "no-python"))
    assert info.installed and not info.runtime_probed and "did not finish" in info.runtime_error
    facts = healthy()
    facts.torch = dataclasses.replace(info, cuda="13.0")
    got = check(evaluate(facts), "cuda")
    assert got.status is Status.WARN and got.summary.startswith("could not ask torch whether CUDA works")


class _Api(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- the name http.server calls
        if self.path != "/api/gpu/devices":
            self.send_error(404)
        elif self.headers.get("Authorization") != "token secret":
            self.send_error(403)
        else:
            body = b'{"available": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_servers_are_asked_over_http_with_their_token(api_server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/"
    probes = probe_servers(
        lambda: [
            Server(api_server, "secret"),
            Server(api_server, "wrong"),
            Server(api_server + "lab/", "secret"),
            Server(dead, "secret"),
        ]
    )
    assert [p.status for p in probes] == [200, 403, 404, None]
    assert probes[0].url == api_server + "api/gpu/devices"
    assert probes[3].error.startswith(f"cannot reach {dead}: ")
    assert (
        check(evaluate(dataclasses.replace(healthy(), servers=probes[3:])), "server").summary
        == probes[3].error
    )


# -- the magic ---------------------------------------------------------------------------------


@pytest.fixture
def ip():
    from IPython.testing.globalipapp import get_ipython

    from jupyter_gpu.kernel import doctor_magic

    shell = get_ipython()
    undo = doctor_magic.register(shell)
    yield shell
    undo()


def test_magic_prints_json_and_text(ip, capsys, monkeypatch):
    from jupyter_gpu.kernel import doctor_magic

    facts = healthy()
    facts.torch = CPU_TORCH
    seen = {}

    def fake_diagnose(**kwargs):
        seen.update(kwargs)
        return evaluate(facts)

    monkeypatch.setattr(doctor_magic, "diagnose", fake_diagnose)
    ip.run_line_magic("gpu_doctor", "--json --no-server")
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"].startswith("No GPU: torch 2.13.0+cpu is a CPU-only build")
    assert seen == {"check_server": False, "dataloader": None}
    ip.run_line_magic("gpu_doctor", "")
    out = capsys.readouterr().out
    assert out.startswith("No GPU: torch 2.13.0+cpu") and "[FAIL]" in out


def test_unregister_removes_the_magic():
    from IPython.testing.globalipapp import get_ipython

    from jupyter_gpu.kernel import doctor_magic

    shell = get_ipython()
    undo = doctor_magic.register(shell)
    assert "gpu_doctor" in shell.magics_manager.magics["line"]
    undo()
    assert "gpu_doctor" not in shell.magics_manager.magics["line"]
    assert "DoctorMagics" not in shell.magics_manager.registry


def test_importing_the_doctor_imports_neither_torch_nor_ipython_nor_pynvml():
    assert modules_after("import jupyter_gpu.doctor", ("torch", "IPython", "pynvml")) == []
