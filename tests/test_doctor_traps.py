"""Issue #21: each environment trap, set for real (environment variables of a real `jupyter gpu
doctor` process, an interface name this machine lacks, a namespace whose only interface is down,
a small tmpfs on /dev/shm, a low ulimit, real jupyter_servers), with the cause, the fix and the
exit code the user sees. The `gpu` tests repeat the table where a clean GPU machine makes the
exit code of each trap its own (here the missing driver already fails the report).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.doctor_facts import check, healthy
from support.kernel_client import run
from support.machine import HAS_GPU
from support.waiting import wait_until

from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.facts import DataLoaderPlan, TorchInfo
from jupyter_gpu.doctor.netif import NetInterface, gloo_selects, nccl_selects

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
for _name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR", "PYTORCH_CUDA_ALLOC_CONF"):
    ENV.pop(_name, None)
MISSING_IF = "jgpu-missing0"  # an interface no machine has
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="this machine's report already fails for its missing driver")
CONFIG_FIX = "in `jupyter_server_config.py`"


def doctor(*args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), **kw):
    """`jupyter gpu doctor --json` as a user runs it: (report, exit code)."""
    done = subprocess.run(
        [*prefix, sys.executable, "-m", "jupyter_gpu", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=120,
        **kw,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout), done.returncode


def row(report: dict, id_: str) -> dict:
    found = [c for c in report["checks"] if c["id"] == id_]
    assert found, f"no {id_} check in {[c['id'] for c in report['checks']]}"
    return found[0]


# (environment, check, status, words of the cause, words of the fix, exit code on a clean GPU machine)
ENV_TRAPS = [
    (
        {"NCCL_SOCKET_IFNAME": MISSING_IF},
        "nccl_ifname",
        "fail",
        f"NCCL_SOCKET_IFNAME={MISSING_IF} names no interface of this machine",
        "Name an interface that exists, is up and reaches the other nodes",
        1,
    ),
    (
        {"GLOO_SOCKET_IFNAME": f"lo,{MISSING_IF}"},
        "gloo_ifname",
        "fail",
        "'Unable to find address for'",
        "GLOO_SOCKET_IFNAME takes exact interface names",
        1,
    ),
    (
        {"NCCL_SOCKET_IFNAME": "lo", "MASTER_ADDR": "10.20.30.40"},
        "nccl_ifname",
        "warn",
        "selects only lo (the loopback interface), but MASTER_ADDR=10.20.30.40",
        "unset it to let NCCL choose",
        0,
    ),
    ({"NCCL_SOCKET_IFNAME": "lo"}, "nccl_ifname", "info", "this machine only", None, 0),
    (
        {"NCCL_P2P_DISABLE": "1"},
        "nccl_transports",
        "warn",
        "NCCL_P2P_DISABLE=1: GPUs exchange data through host memory instead of NVLink",
        "`unset NCCL_P2P_DISABLE`",
        0,
    ),
    (
        {"NCCL_IB_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
        "nccl_transports",
        "warn",
        "NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1",
        "`unset NCCL_SHM_DISABLE NCCL_IB_DISABLE`",
        0,
    ),
    (
        {"NCCL_DEBUG": "INFO"},
        "nccl_debug",
        "warn",
        "every rank prints NCCL's set-up log",
        "NCCL_DEBUG=WARN",
        0,
    ),
    (
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"},
        "nccl_errors",
        "warn",
        "leaves the other ranks hanging forever",
        "TORCH_NCCL_BLOCKING_WAIT=1",
        0,
    ),
    (
        {"CUDA_LAUNCH_BLOCKING": "1"},
        "launch_blocking",
        "warn",
        "every CUDA kernel launch waits for the GPU",
        "`%env CUDA_LAUNCH_BLOCKING=0`",
        0,
    ),
    (
        {"PYTORCH_CUDA_ALLOC_CONF": "bogus_option:1"},
        "alloc_conf",
        "fail",
        "'bogus_option' is not an allocator option",
        "Correct or unset PYTORCH_CUDA_ALLOC_CONF",
        1,
    ),
    (
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:yes"},
        "alloc_conf",
        "fail",
        "expandable_segments:yes must be True or False",
        "Correct or unset PYTORCH_CUDA_ALLOC_CONF",
        1,
    ),
]
TRAP_IDS = [",".join(f"{k}={v}" for k, v in e.items()) for e, *_ in ENV_TRAPS]


@no_gpu_only
@pytest.mark.parametrize(("env", "id_", "status", "cause", "fix", "clean_exit"), ENV_TRAPS, ids=TRAP_IDS)
def test_each_environment_trap_is_named_with_its_fix(env, id_, status, cause, fix, clean_exit):
    report, code = doctor("--no-server", env=env)
    got = row(report, id_)
    assert got["status"] == status and cause in got["summary"], got
    assert fix is None or fix in got["fix"], got
    assert code == 1  # here the missing driver is a FAIL as well


@pytest.mark.gpu
@pytest.mark.parametrize(("env", "id_", "status", "cause", "fix", "clean_exit"), ENV_TRAPS, ids=TRAP_IDS)
def test_each_environment_trap_on_a_gpu_machine(env, id_, status, cause, fix, clean_exit):
    """On the H200: the trap's own exit code, and a headline that names it, never 'No GPU'."""
    report, code = doctor("--no-server", env=env)
    print(report["verdict"], "| exit", code)
    got = row(report, id_)
    assert got["status"] == status and cause in got["summary"], got
    assert code == clean_exit, report["verdict"]
    assert not report["verdict"].startswith("No GPU")
    if status == "fail":
        assert cause in report["verdict"]


def test_an_interface_that_is_down_fails(tmp_path):
    """A network namespace of its own has one interface, lo, and it is down."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"]).returncode != 0:
        pytest.skip("cannot create a network namespace here")
    report, _ = doctor("--no-server", env={"NCCL_SOCKET_IFNAME": "lo"}, prefix=("unshare", "-n"))
    got = row(report, "nccl_ifname")
    assert got["status"] == "fail" and got["summary"] == (
        "NCCL_SOCKET_IFNAME=lo: lo is down, so NCCL reaches no other process through it"
    )


@pytest.mark.parametrize(
    ("spec", "selected"),
    [
        ("eth", ["eth0", "eth1"]),
        ("=eth0", ["eth0"]),
        ("=eth", []),
        ("^docker,lo", ["eth0", "eth1", "ib0"]),
        ("^=eth0", ["docker0", "eth1", "ib0", "lo"]),
        ("ib,eth1", ["eth1", "ib0"]),
        ("docker0", ["docker0"]),
        (MISSING_IF, []),
    ],
)
def test_nccl_interface_selection_follows_nccl(spec, selected):
    assert nccl_selects(spec, ["docker0", "eth0", "eth1", "ib0", "lo"]) == selected


def test_gloo_takes_exact_names():
    assert gloo_selects("eth0,lo", ["eth0", "eth1", "lo"]) == ["eth0", "lo"]
    assert gloo_selects("eth", ["eth0"]) == []


def test_a_docker_bridge_across_nodes_is_a_warning():
    facts = healthy()
    facts.interfaces = [
        NetInterface("lo", True, ["127.0.0.1"]),
        NetInterface("docker0", True, ["172.17.0.1"]),
        NetInterface("eth0", True, ["10.0.0.5"]),
    ]
    facts.env.update(NCCL_SOCKET_IFNAME="docker", MASTER_ADDR="node0.cluster")
    got = check(evaluate(facts), "nccl_ifname")
    assert (
        got.status is Status.WARN
        and "docker0 (a container bridge), but MASTER_ADDR=node0.cluster" in got.summary
    )
    facts.env["NCCL_SOCKET_IFNAME"] = "^docker,lo"
    assert check(evaluate(facts), "nccl_ifname").summary == "NCCL_SOCKET_IFNAME=^docker,lo: eth0"


# -- the headline ------------------------------------------------------------------------------


def test_a_bad_allocator_key_is_the_headline_not_no_gpu():
    """What the H200 showed: torch's probe dies on the key ("No GPU", WARN, exit 0, fix `import
    torch`). Now the allocator setting is the verdict, a FAIL, and the torch row points at it."""
    facts = healthy()
    facts.env["PYTORCH_CUDA_ALLOC_CONF"] = "bogus_option:1"
    facts.torch = TorchInfo(
        runtime_error="the torch probe failed (exit -6): RuntimeError: Unrecognized key 'bogus_option' in "
        "Allocator Config."
    )
    report = evaluate(facts)
    assert report.verdict == (
        "2× NVIDIA H200 found, but PYTORCH_CUDA_ALLOC_CONF=bogus_option:1: 'bogus_option' is not an "
        "allocator option: torch stops at it with 'Unrecognized key'"
    )
    assert report.primary.id == "alloc_conf" and report.status is Status.FAIL
    assert check(report, "torch").fix.startswith("Caused by the allocator setting")
    facts.torch = dataclasses.replace(  # torch answered, but is_available() raised on the key
        healthy().torch, available=None, devices=[], runtime_error="RuntimeError: Unrecognized key"
    )
    report = evaluate(facts)
    assert report.primary.id == "alloc_conf" and report.verdict.startswith("2× NVIDIA H200 found, but ")
    assert check(report, "cuda").fix.startswith("Caused by the allocator setting")


def test_gpus_without_nvidia_smi_in_a_container():
    facts = healthy()
    facts.nvidia_smi = None
    facts.env["NVIDIA_DRIVER_CAPABILITIES"] = "compute"
    got = check(evaluate(facts), "nvidia_smi")
    assert got.status is Status.WARN
    assert got.summary == (
        "GPUs are visible here, but nvidia-smi is not on PATH (NVIDIA_DRIVER_CAPABILITIES=compute leaves "
        "out utility)"
    )
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in got.fix


# -- DataLoader limits -------------------------------------------------------------------------


def _unshare_mount() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-m", "true"]).returncode == 0


@pytest.mark.parametrize(
    ("args", "id_", "status", "cause"),
    [
        (
            ("--workers", "8", "--batch-mib", "16"),
            "dataloader_shm",
            "fail",
            "8 workers x 2 batches in flight x 16.0 MiB = 256 MiB of /dev/shm, but /dev/shm holds only 64.0 MiB",
        ),
        (("--workers", "1", "--batch-mib", "4"), "dataloader_shm", "ok", "= 8.00 MiB of /dev/shm: fits"),
        ((), "shm", "warn", "/dev/shm is only 64.0 MiB"),
    ],
)
def test_dev_shm_against_what_the_workers_need(args, id_, status, cause):
    """A 64 MiB tmpfs on /dev/shm (Docker's default) in a mount namespace of the doctor's own."""
    if not _unshare_mount():
        pytest.skip("cannot create a mount namespace here")
    mount = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    report, _ = doctor(
        "--no-server", *args, prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh")
    )
    got = row(report, id_)
    assert got["status"] == status and cause in got["summary"], got
    if status == "fail":
        assert "`docker run --shm-size=8g`" in got["fix"]


def test_a_low_open_files_limit_is_warned_with_the_sharing_strategy():
    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    report, _ = doctor("--no-server", preexec_fn=low)
    got = row(report, "open_files")
    assert got["status"] == "warn"
    assert got["summary"].startswith("ulimit -n is 256: DataLoader workers pass every tensor")
    assert "sharing strategy file_descriptor" in got["summary"]
    assert "`torch.multiprocessing.set_sharing_strategy('file_system')`" in got["fix"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "4"), "--workers and --batch-mib go together"),
        (("--workers", "0", "--batch-mib", "8"), "--workers must be at least 1"),
        (("--workers", "4", "--batch-mib", "-1"), "--workers must be at least 1 and --batch-mib a positive"),
    ],
)
def test_a_bad_dataloader_statement_is_one_line(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_gpu", "doctor", "--no-server", *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"jupyter gpu doctor: {message}")
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_plan_is_what_dataloader_keeps_in_flight():
    assert DataLoaderPlan.stated(4, 8).shm_bytes == 4 * 2 * 8 * 2**20
    assert DataLoaderPlan.stated(None, None) is None


# -- the Jupyter server the kernel belongs to ------------------------------------------------


def start_server(runtime: Path, *args: str) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--allow-root", "--no-browser", "--port=0", *args],
        env={**ENV, "JUPYTER_RUNTIME_DIR": str(runtime)},
        cwd=runtime,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until("the server's jpserver file", lambda: list(runtime.glob("jpserver-*.json")), timeout=60)
    return server


# (server arguments, {check: (status, words of the cause)}, words of the fix)
SERVERS = [
    (
        (),
        {"server_auth": ("ok", "asks for a token"), "server_origin": ("ok", ""), "server_xsrf": ("ok", "")},
        None,
    ),
    (
        ("--IdentityProvider.token=",),
        {"server_auth": ("fail", "has no token and no password: every user of this machine can run code")},
        "`c.IdentityProvider.token = '<a long random string>'`",
    ),
    (
        ("--ServerApp.allow_origin=*",),
        {"server_origin": ("warn", "lets '*' call it from a browser")},
        "`c.ServerApp.allow_origin = ''`",
    ),
    (
        ("--IdentityProvider.token=", "--ServerApp.allow_origin=*"),
        {"server_origin": ("fail", "and with no token it can run code")},
        "`c.ServerApp.allow_origin = ''`",
    ),
    (
        ("--ServerApp.disable_check_xsrf=True",),
        {"server_xsrf": ("warn", "accepts a POST without an XSRF token")},
        "`c.ServerApp.disable_check_xsrf = False`",
    ),
    (
        ("--ServerApp.ip=0.0.0.0",),
        {"server_tls": ("warn", "listens on 0.0.0.0 without TLS")},
        "`c.ServerApp.ip = '127.0.0.1'`",
    ),
]


@pytest.mark.parametrize(
    ("args", "expected", "fix"), SERVERS, ids=[" ".join(a) or "default" for a, *_ in SERVERS]
)
def test_the_jupyter_server_is_asked_as_a_stranger_would(args, expected, fix):
    with tempfile.TemporaryDirectory() as runtime:
        server = start_server(Path(runtime), *args)
        try:
            report, code = doctor(env={"JUPYTER_RUNTIME_DIR": runtime})
        finally:
            server.terminate()
            server.wait(30)
    for id_, (status, cause) in expected.items():
        got = row(report, id_)
        assert got["status"] == status and cause in got["summary"], got
        if status != "ok":
            assert fix in got["fix"] and CONFIG_FIX in got["fix"], got
    if any(status == "fail" for status, _ in expected.values()):
        assert code == 1
    if os.geteuid() == 0:  # this machine: root, so the server ran with --allow-root
        assert row(report, "root")["status"] == "warn"
        assert "`c.ServerApp.allow_root = False`" in row(report, "root")["fix"]


# -- build facts never initialise CUDA ---------------------------------------------------------


def test_build_facts_leave_cudnn_version_to_the_child(monkeypatch):
    """torch.backends.cudnn.version() asks every device's capability (torch.cuda._lazy_init):
    read in the kernel by %gpu_doctor, it initialised CUDA there on the H200."""
    torch = pytest.importorskip("torch")
    from jupyter_gpu.doctor import probe

    asked = []
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: asked.append("cudnn.version"))
    facts = probe.build_facts(torch)
    assert asked == [] and "cudnn_version" not in facts
    assert facts["sharing_strategy"] == torch.multiprocessing.get_sharing_strategy()


# -- jupyter gpu preflight --nccl-env ------------------------------------------------------------


def preflight_nccl_env(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpu", "preflight", "--nccl-env", "--size-mib", "1", "--iters", "2"]
        + ["--timeout", "60"],
        capture_output=True,
        text=True,
        env={**ENV, **env},
        timeout=300,
    )


@no_gpu_only
@pytest.mark.parametrize(
    ("env", "code", "words"),
    [
        ({}, 3, "; no NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME to test with gloo instead"),
        (
            {"NCCL_SOCKET_IFNAME": MISSING_IF},
            1,
            f"; gloo through {MISSING_IF} fails too: rank ",
        ),
        (
            {"GLOO_SOCKET_IFNAME": "lo"},
            3,
            "; gloo all-reduced through lo, so the interface setting works for gloo",
        ),
    ],
)
def test_preflight_nccl_env_without_a_gpu_says_why_and_tries_gloo(env, code, words):
    """Real ranks (the one launcher, spawned) with the interface setting as given."""
    pytest.importorskip("torch")
    done = preflight_nccl_env(env)
    assert "Traceback" not in done.stderr, done.stderr
    verdict = done.stdout.strip().splitlines()[-1]
    assert done.returncode == code, done.stdout + done.stderr
    assert verdict.startswith("NCCL cannot run here: No GPU: ") and words in verdict
    if env.get("NCCL_SOCKET_IFNAME") == MISSING_IF:
        assert f"Unable to find address for: {MISSING_IF}" in verdict
        assert "[FAIL] NCCL_SOCKET_IFNAME:" in done.stdout  # the doctor's row, with its fix, above


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("env", "code", "words"),
    [
        ({}, 0, "NCCL works with these settings"),
        ({"NCCL_SOCKET_IFNAME": "lo"}, 0, "NCCL works with these settings"),
        ({"NCCL_SOCKET_IFNAME": MISSING_IF}, 1, "NCCL fails: "),
        ({"NCCL_P2P_DISABLE": "1"}, 0, "NCCL works with these settings"),
    ],
)
def test_preflight_nccl_env_runs_nccl_on_the_gpus(env, code, words):
    done = preflight_nccl_env(env)
    print(done.stdout)
    assert done.returncode == code, done.stdout + done.stderr
    assert words in done.stdout.strip().splitlines()[-1]
    assert "0.00 GB/s" not in done.stdout  # one rank moves nothing: no bandwidth is claimed


# -- a real kernel: no diagnostic magic initialises CUDA -------------------------------------------


@pytest.mark.gpu
def test_no_diagnostic_magic_initialises_cuda_in_the_kernel():
    """On the H200, %gpu_doctor left torch.cuda.is_initialized() True (cuDNN's version check)."""
    from jupyter_client.manager import start_new_kernel

    env = {**ENV, "JUPYTER_GPU_DDP_PRESTART": "0"}
    manager, client = start_new_kernel(kernel_name="python3", env=env)
    try:
        assert run(client, "%load_ext jupyter_gpu\nimport torch", timeout=180).ok
        for magic in (
            "%gpu_doctor",
            "%gpu_doctor --json",
            "%gpu_doctor --no-server --workers 4 --batch-mib 8",
            "%gpu_mem",
            "%gpu_monitor --interval 0.2",
            "%gpu_monitor --stop",
        ):
            cell = run(client, magic, timeout=180)
            assert cell.ok, (magic, cell.reply)
            initialised = run(client, "print(torch.cuda.is_initialized())", timeout=180).stream()
            assert initialised.strip() == "False", magic
        doctor = json.loads(run(client, "%gpu_doctor --json --no-server", timeout=180).stream())
        assert doctor["cuda_ready"] is True
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
