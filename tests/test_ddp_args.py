"""Argument checks of the ddp magics: every bad input is one UsageError, no process started."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.testing import globalipapp

from jupyter_gpu.ddp.abort import SECRET_ENV
from jupyter_gpu.kernel.ddp import args
from jupyter_gpu.kernel.ddp.magics import DDPMagics, register


def launch(line: str) -> tuple[args.WorkerOptions, args.CellOptions]:
    ns = args.parse(DDPMagics.ddp_launch, line)
    options = args.worker_options(ns)
    return options, args.cell_options(ns, options.nproc * options.nnodes, "_result")


def test_defaults() -> None:
    options, cell = launch("-n 2")
    assert options == args.WorkerOptions(nproc=2)
    assert cell == args.CellOptions(return_name="_result", output=(0,))


def test_everything_given() -> None:
    options, cell = launch(
        "--gpus 2,3 --backend nccl --amp bf16 --push model,cfg --return out "
        "--timeout 30 --output all --start-method spawn"
    )
    assert options.nproc == 2 and options.gpus == (2, 3) and options.backend == "nccl"
    assert options.amp == "bf16" and options.start_method == "spawn"
    assert cell == args.CellOptions(push=("model", "cfg"), return_name="out", timeout=30, output=None)


def test_multi_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with pytest.raises(UsageError, match=SECRET_ENV):  # commands would cross the network unsigned
        launch("-n 4 --nnodes 2 --rdzv-endpoint node0:29400")
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(UsageError, match=SECRET_ENV):
        launch("-n 4 --nnodes 2 --rdzv-endpoint node0:29400")
    monkeypatch.setenv(SECRET_ENV, "x" * 31)  # guessable offline from one signed message
    with pytest.raises(UsageError, match=SECRET_ENV):
        launch("-n 4 --nnodes 2 --rdzv-endpoint node0:29400")
    monkeypatch.setenv(SECRET_ENV, "0123456789abcdef" * 2)
    options, _ = launch("-n 4 --nnodes 2 --rdzv-endpoint node0:29400")
    assert (options.nnodes, options.rdzv_endpoint, options.node_rank) == (2, "node0:29400", None)
    options, _ = launch("-n 4 --nnodes 2 --node-rank 1 --rdzv-endpoint node0:29400")
    assert options.node_rank == 1


def test_script_arguments_are_left_alone() -> None:
    ns = args.parse(DDPMagics.ddp_launch, "-n 2 train.py --lr 0.1 -n 3")
    assert ns.nproc == 2 and ns.script == "train.py" and ns.script_args == ["--lr", "0.1", "-n", "3"]


@pytest.mark.parametrize(
    "line",
    [
        "",  # no -n and no --gpus
        "-n 0",
        "-n two",
        "-n 3 --gpus 0,1",
        "-n 2 --gpus 0,x",
        "-n 2 --gpus 0,0",
        "-n 2 --backend mpi",
        "-n 2 --amp fp8",
        "-n 2 --nnodes 2",
        "-n 2 --nnodes 0",
        "-n 2 --nnodes 2 --rdzv-endpoint node0",
        "-n 2 --nnodes 2 --rdzv-endpoint node0:99999",
        "-n 2 --nnodes 2 --node-rank 2 --rdzv-endpoint node0:1",
        "-n 2 --push 1x",
        "-n 2 --push a,class",
        "-n 2 --return a.b",
        "-n 2 --timeout 0",
        "-n 2 --timeout nan",
        "-n 2 --timeout inf",
        "-n 2 --timeout -inf",
        "-n 2 --timeout 1e12",
        "-n 130",
        "-n 100000",
        "-n 2 --push '",
        "-n 2 --output 2",
        "-n 2 --output 0,-1",
        "-n 2 --start-method fork",
        "-n 2 --no-such-option",
    ],
)
def test_bad_arguments(line: str) -> None:
    with pytest.raises(UsageError):
        launch(line)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("line", ["-n 130", "-n 100000", "-n 2 --timeout nan", "-n 2 --timeout inf"])
def test_absurd_launches_are_refused_at_once_leaving_nothing(ip, line: str) -> None:  # type: ignore[no-untyped-def]
    """-n 130 used to leak ~280 fds and end in 'too many fds'; -n 100000 ran 15 s and took 2 GB."""
    import psutil

    fds, children = _open_fds(), psutil.Process().children(recursive=True)
    started = time.monotonic()
    with pytest.raises(UsageError) as refused:
        ip.run_cell_magic("ddp_launch", line, "x = 1")
    assert time.monotonic() - started < 5  # argument checking, not a launch that failed
    assert "\n" not in str(refused.value)
    assert _open_fds() == fds and psutil.Process().children(recursive=True) == children


def test_the_rank_limit_says_why(ip) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError, match=r"at most \d+ ranks per node"):
        ip.run_cell_magic("ddp_launch", f"-n {args.max_ranks() + 1}", "x = 1")


def test_names() -> None:
    assert args.names("a, b  c", "%ddp_push") == ("a", "b", "c")
    for bad in ("", "a-b", "for"):
        with pytest.raises(UsageError):
            args.names(bad, "%ddp_push")


def get_ipython():  # type: ignore[no-untyped-def]
    """The shared test shell (start_ipython returns it only on its first call)."""
    globalipapp.start_ipython()
    return globalipapp.get_ipython()


@pytest.fixture()
def ip():  # type: ignore[no-untyped-def]
    shell = get_ipython()
    undo = register(shell)
    yield shell
    undo()


@pytest.mark.parametrize(
    ("kind", "line", "cell"),
    [
        ("cell", "ddp_launch -n 2 extra.py", "x = 1"),
        ("line", "ddp_launch -n 2", None),
        ("line", "ddp_launch -n 2 --push a script.py", None),
        ("cell", "ddp_launch -n 2 --push not_defined_anywhere", "x = 1"),
        ("cell", "ddp", "x = 1"),  # no session
        ("line", "ddp_push a", None),
        ("line", "ddp_pull", None),
        ("line", "ddp_restart", None),
        ("line", "ddp_launch -n 2 /no/such/script.py", None),
    ],
)
def test_magics_refuse_before_starting_anything(ip, kind: str, line: str, cell: str | None) -> None:  # type: ignore[no-untyped-def]
    name, _, rest = line.partition(" ")
    with pytest.raises(UsageError):
        if kind == "cell":
            ip.run_cell_magic(name, rest, cell)
        else:
            ip.run_line_magic(name, rest)


def test_unregister_removes_every_magic() -> None:
    shell = get_ipython()
    undo = register(shell)
    names = {
        "ddp_launch",
        "ddp_start",
        "ddp",
        "ddp_push",
        "ddp_pull",
        "ddp_status",
        "ddp_stop",
        "ddp_restart",
    }
    registered = set(shell.magics_manager.magics["line"]) | set(shell.magics_manager.magics["cell"])
    assert names <= registered
    undo()
    registered = set(shell.magics_manager.magics["line"]) | set(shell.magics_manager.magics["cell"])
    assert not names & registered


def test_loading_the_magics_imports_no_torch() -> None:
    """%load_ext must stay cheap: torch is imported by the magics when they run, not before."""
    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "from jupyter_gpu.kernel.ddp.magics import register\n"
        "register(InteractiveShell.instance())\nprint('torch' in sys.modules)\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize(
    ("device", "backend", "nproc", "gpus", "placed"),
    [
        ("auto", "gloo", 2, 1, "cpu"),  # the workshop case: 2 gloo ranks on a one-GPU laptop
        ("auto", "gloo", 4, 0, "cpu"),
        ("auto", "gloo", 2, 2, "auto"),  # a GPU each: gloo on the GPUs, as asked
        ("auto", "auto", 2, 1, "auto"),  # the rank then says it needs a GPU, and how to go on
        ("auto", "nccl", 2, 1, "auto"),
        ("cpu", "auto", 2, 8, "cpu"),
        ("cpu", "gloo", 1, 1, "cpu"),
        ("cuda", "auto", 1, 1, "auto"),
    ],
)
def test_ranks_go_to_the_cpu_with_gloo_and_too_few_gpus(device, backend, nproc, gpus, placed):
    assert args.rank_device(device, backend, nproc, gpus) == placed


@pytest.mark.parametrize(
    ("device", "backend", "nproc", "gpus", "message"),
    [
        ("cpu", "nccl", 2, 2, "--device cpu needs --backend gloo (or auto): NCCL runs on GPUs only"),
        ("cuda", "gloo", 2, 1, "--device cuda: -n 2 needs 2 GPUs and this node shows 1"),
    ],
)
def test_impossible_devices_are_one_line(device, backend, nproc, gpus, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        args.rank_device(device, backend, nproc, gpus)


def test_the_cpu_note_is_said_only_when_gpus_were_passed_over(monkeypatch):
    monkeypatch.setattr(args, "visible_gpus", lambda: 1)
    parse = args.parse

    def note(line: str) -> str | None:
        ns = parse(DDPMagics.ddp_start, line)
        return args.device_note(args.worker_options(ns), ns)

    assert note("-n 2 --backend gloo") == (
        "note: 2 ranks and 1 GPU here, so every rank runs on the CPU with gloo (--device cpu says so outright)"
    )
    assert note("-n 2 --device cpu") is None  # asked for
    assert note("-n 1 --backend gloo") is None  # a GPU for the rank
    monkeypatch.setattr(args, "visible_gpus", lambda: 0)
    assert note("-n 2 --backend gloo") is None  # nothing passed over
