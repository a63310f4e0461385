"""Issue #21: each environment trap, set for real (environment variables of a real `jupyter gpu
doctor` process, an interface name this machine lacks, a namespace whose only interface is down),
with the cause, the fix and the exit code the user sees; how NCCL and gloo pick interfaces; and a
bad allocator key as the headline, never 'No GPU'. The `gpu` tests repeat the table where a clean
GPU machine makes the exit code of each trap its own (here the missing driver already fails the
report)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest
from support.doctor_cli import MISSING_IF, doctor, no_gpu_only, row
from support.doctor_facts import check, healthy

from jupyter_gpu.doctor import Status, evaluate
from jupyter_gpu.doctor.facts import TorchInfo
from jupyter_gpu.doctor.netif import NetInterface, gloo_selects, nccl_selects

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


# -- the headline ---------------------------------------------------------------------------------


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
