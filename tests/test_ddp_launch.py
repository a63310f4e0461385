"""``%%ddp_launch`` in a real kernel on CPU with gloo: output, results, errors, teardown."""

from __future__ import annotations

import secrets
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ddp_kernel import (
    LAST_RECORD,
    Cell,
    Kernel,
    helper_processes,
    no_ranks_left,
    rank_processes,
    wait_gone,
)

from jupyter_gpu.ddp.abort import SECRET_ENV

ALL_REDUCE = """%%ddp_launch -n 2 --output all
print(f"hello from {RANK} of {WORLD_SIZE} on {device}")
x = torch.ones(2) * (RANK + 1)
dist.all_reduce(x)
_result = x
"""


def test_output_of_each_rank_reaches_the_launching_cell(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run(ALL_REDUCE)
    assert cell.error is None, cell.traceback
    lines = sorted(cell.stdout.splitlines())
    assert lines == ["[rank 0] hello from 0 of 2 on cpu", "[rank 1] hello from 1 of 2 on cpu"]
    streams = [
        m for m in ddp_kernel.iopub if m["msg_type"] == "stream" and "hello from" in m["content"]["text"]
    ]
    assert streams and all(m["parent_header"]["msg_id"] == cell.msg_id for m in streams)


def test_results_come_back_as_a_dict_of_cpu_values(ddp_kernel: Kernel) -> None:
    ddp_kernel.run(ALL_REDUCE)
    cell = ddp_kernel.run("print({r: (t.tolist(), t.device.type) for r, t in _ddp.items()})")
    assert cell.stdout.strip() == "{0: ([3.0, 3.0], 'cpu'), 1: ([3.0, 3.0], 'cpu')}"


def test_only_rank_0_is_shown_by_default_and_return_names_another_variable(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run("%%ddp_launch -n 2 --return out\nprint('rank', RANK)\nout = RANK * 10\n")
    assert cell.stdout == "rank 0\n"
    assert ddp_kernel.run("print(_ddp)").stdout.strip() == "{0: 0, 1: 10}"


def test_amp_runs_the_cell_under_autocast(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run(
        "%%ddp_launch -n 1 --amp bf16\n"
        "print(torch.is_autocast_enabled('cpu'), (torch.ones(2, 2) @ torch.ones(2, 2)).dtype)\n"
    )
    assert cell.stdout == "True torch.bfloat16\n", cell.traceback


def test_notebook_functions_and_classes_travel_with_push(ddp_kernel: Kernel) -> None:
    ddp_kernel.run(
        "class Scale:\n    def __init__(self, k):\n        self.k = k\n"
        "def double(v):\n    return 2 * v\nscale = Scale(5)\n"
    )
    cell = ddp_kernel.run("%%ddp_launch -n 2 --push double,scale\n_result = double(scale.k) + RANK\n")
    assert cell.error is None, cell.traceback
    assert ddp_kernel.run("print(_ddp)").stdout.strip() == "{0: 10, 1: 11}"


def test_a_non_picklable_object_is_named(ddp_kernel: Kernel) -> None:
    ddp_kernel.run("import threading\nlock = threading.Lock()")
    cell = ddp_kernel.run("%%ddp_launch -n 2 --push lock\nprint(lock)\n")
    assert cell.error is not None and "cannot send 'lock'" in cell.traceback


def test_a_raising_rank_shows_its_traceback_with_cell_lines_and_stops_the_others(
    ddp_kernel: Kernel, tmp_path: Path
) -> None:
    raised_at = tmp_path / "raised_at"
    cell = ddp_kernel.run(
        textwrap.dedent(f"""\
        %%ddp_launch -n 2
        def check(v):
            if v == 1:
                open({str(raised_at)!r}, "w").write(repr(__import__("time").time()))
                raise ValueError(f"bad value on rank {{v}}")
        check(RANK)
        dist.barrier()
        """)
    )
    shown_after = time.time() - float(raised_at.read_text())
    assert cell.error is not None and cell.error["ename"] == "DDPError"
    tb = cell.traceback
    assert "Error on rank 1:" in tb
    assert "Cell In[" in tb and "line 6\n    check(RANK)" in tb
    assert 'line 5, in check\n    raise ValueError(f"bad value on rank {v}")' in tb
    assert "ValueError: bad value on rank 1\n\n(rank 0 stopped)" in tb
    assert "Every rank's output: " in tb  # where the log files are kept
    assert "jupyter_gpu/" not in tb and "torch/distributed" not in tb  # no launcher internals
    assert shown_after < 5, f"the error came {shown_after:.1f} s after the exception"
    assert no_ranks_left(ddp_kernel.pid)


def test_a_rank_killed_by_a_signal_is_reported_as_such(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run(
        textwrap.dedent("""\
        %%ddp_launch -n 2
        import os, signal, sys
        if RANK == 1:
            print("about to die", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()
        """)
    )
    assert cell.error is not None
    assert "rank 1 (pid" in cell.traceback and "killed by SIGKILL (out of memory?)" in cell.traceback
    assert "about to die" in cell.traceback  # the last lines of its stderr
    assert no_ranks_left(ddp_kernel.pid)


def test_interrupt_stops_every_rank(ddp_kernel: Kernel) -> None:
    msg_id = ddp_kernel.submit(
        "%%ddp_launch -n 2\nimport time\nprint('started', flush=True)\ntime.sleep(60)\n"
    )
    ddp_kernel.wait_for_text(msg_id, "started")
    pids = [p.pid for p in rank_processes(ddp_kernel.pid)]
    assert len(pids) == 2  # the two ranks: nothing serves a store for a cell on one node
    ddp_kernel.km.interrupt_kernel()
    messages = ddp_kernel.wait(msg_id, timeout=15)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert errors and errors[0]["ename"] == "DDPInterrupted"
    assert "stopped ranks 0, 1" in "\n".join(errors[0]["traceback"])
    assert wait_gone(pids, 5) == []
    assert no_ranks_left(ddp_kernel.pid)


def test_timeout_stops_the_ranks(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run("%%ddp_launch -n 2 --timeout 1\nimport time\ntime.sleep(60)\n", timeout=30)
    assert cell.error is not None and "timed out after 1 s" in cell.traceback
    assert no_ranks_left(ddp_kernel.pid)


def test_bad_arguments_are_a_usage_error(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run("%%ddp_launch -n 2 --output 7\nprint(1)\n")
    # IPython prints a UsageError as one stderr line, without a traceback
    assert cell.stderr.startswith("UsageError: --output lists rank 7 but there are 2 ranks")
    assert cell.stdout == ""


def test_a_syntax_error_is_shown_before_any_rank_starts(ddp_kernel: Kernel) -> None:
    cell = ddp_kernel.run("%%ddp_launch -n 2\nx = 1\ny = (\n")
    assert cell.error is not None and cell.error["ename"] == "SyntaxError"
    assert no_ranks_left(ddp_kernel.pid)


def test_script_runs_like_torchrun_and_its_error_is_shown(ddp_kernel: Kernel, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""\
        import os, sys
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        x = torch.ones(1)
        dist.all_reduce(x)
        print(os.environ["RANK"], os.environ["LOCAL_WORLD_SIZE"], sys.argv[1:], x.item())
        if "--fail" in sys.argv and dist.get_rank() == 1:
            raise RuntimeError("script failed")
        dist.destroy_process_group()
        """)
    )
    cell = ddp_kernel.run(f"%ddp_launch -n 2 --output all {script} --epochs 3 --fail")
    assert sorted(cell.stdout.splitlines()) == [
        "[rank 0] 0 2 ['--epochs', '3', '--fail'] 2.0",
        "[rank 1] 1 2 ['--epochs', '3', '--fail'] 2.0",
    ]
    assert cell.error is not None and cell.error["evalue"] == "rank 1: RuntimeError: script failed"
    tb = cell.traceback
    assert tb.startswith("Error on rank 1 (pid "), tb  # what it raised comes first
    assert f'File "{script}", line 8, in <module>' in tb
    assert "RuntimeError: script failed\n(rank 1 then exited with code 1)" in tb
    assert "runpy" not in tb


def test_a_script_rank_that_raised_exits_with_its_code_while_a_collective_completes(
    ddp_kernel: Kernel, tmp_path: Path
) -> None:
    """The script leaves its process group up and a collective finishes while the failing rank's
    interpreter shuts down: its completion callback needs the GIL then. Left to interpreter
    shutdown, that aborted the rank (SIGABRT) instead of letting it exit with code 1."""
    script = tmp_path / "late_collective.py"
    script.write_text(
        textwrap.dedent("""\
        import sys, time
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            time.sleep(1)  # joins the all-reduce while rank 1 is shutting down
            dist.all_reduce(torch.ones(1))
            dist.destroy_process_group()
        else:
            dist.all_reduce(torch.ones(1), async_op=True).get_future().then(lambda fut: fut.value())

            class SlowShutdown:  # like a logger flushing at exit
                def __del__(self, sleep=time.sleep):
                    sleep(2)

            sys.slow_shutdown = SlowShutdown()  # released during interpreter shutdown
            raise RuntimeError("script failed")
        """)
    )
    cell = ddp_kernel.run(f"%ddp_launch -n 2 {script}")
    tb = cell.traceback
    assert tb.startswith("Error on rank 1 (pid "), tb
    assert "RuntimeError: script failed\n(rank 1 then exited with code 1)" in tb
    assert "SIGABRT" not in tb


def test_a_script_rank_that_raised_with_a_collective_pending_is_reported_soon(
    ddp_kernel: Kernel, tmp_path: Path
) -> None:
    """Its peer never joins that collective: taking the process group down must not wait for it."""
    script = tmp_path / "pending_collective.py"
    script.write_text(
        textwrap.dedent("""\
        import time
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            work = dist.all_reduce(torch.ones(1), async_op=True)
            raise RuntimeError("failed with a collective pending")
        time.sleep(60)
        """)
    )
    started = time.monotonic()
    cell = ddp_kernel.run(f"%ddp_launch -n 2 {script}")
    elapsed = time.monotonic() - started
    assert (
        "RuntimeError: failed with a collective pending\n(rank 1 then exited with code 1)" in cell.traceback
    )
    assert elapsed < 20, f"the error came after {elapsed:.0f} s: the failing rank waited for its peer"
    assert no_ranks_left(ddp_kernel.pid)


@pytest.fixture(scope="module")
def other_kernel() -> Iterator[Kernel]:
    """A second notebook whose forkserver starts in the background before its first launch, as
    loading the magics does where two GPUs are visible."""
    kernel = Kernel()
    cell = kernel.run("from jupyter_gpu.ddp.forkserver import prestart_forkserver\nprestart_forkserver()")
    assert cell.error is None, cell.traceback
    yield kernel
    kernel.close()


def run_together(cells: dict[Kernel, str]) -> dict[Kernel, Cell]:
    """Submit one cell to each kernel at once, then wait for all of them."""
    ids = {kernel: kernel.submit(code) for kernel, code in cells.items()}
    for kernel, msg_id in ids.items():
        kernel.wait(msg_id)
    return {kernel: Cell(kernel, msg_id) for kernel, msg_id in ids.items()}


def test_two_notebooks_launch_at_the_same_time(ddp_kernel: Kernel, other_kernel: Kernel) -> None:
    deadline = time.monotonic() + 10
    while not any("multiprocessing.forkserver" in c for c in helper_processes(other_kernel.pid)):
        assert time.monotonic() < deadline, "the forkserver did not start in the background"
        time.sleep(0.1)
    done = run_together(
        {
            k: f"%%ddp_launch -n 2 --output all\nx = torch.full((1,), {i}.0)\n"
            "dist.all_reduce(x)\nprint('sum', x.item())\n"
            for i, k in enumerate((ddp_kernel, other_kernel), start=1)
        }
    )
    assert sorted(done[ddp_kernel].stdout.splitlines()) == ["[rank 0] sum 2.0", "[rank 1] sum 2.0"]
    assert sorted(done[other_kernel].stdout.splitlines()) == ["[rank 0] sum 4.0", "[rank 1] sum 4.0"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_kernels_as_two_nodes(ddp_kernel: Kernel, other_kernel: Kernel) -> None:
    """Multi-node through a c10d endpoint (both 'nodes' on this host), and static --node-rank."""
    kernels = (ddp_kernel, other_kernel)
    secret = secrets.token_hex(16)
    for kernel in kernels:  # the secret the nodes share, as a user exports it on every node
        kernel.run(f"%env {SECRET_ENV}={secret}")
    for how in ("", "--node-rank {i}"):
        endpoint = f"localhost:{_free_port()}"
        done = run_together(
            {
                k: f"%%ddp_launch -n 1 --nnodes 2 --rdzv-endpoint {endpoint} {how.format(i=i)} --output all\n"
                "x = torch.ones(1) * (RANK + 1)\ndist.all_reduce(x)\nprint(RANK, WORLD_SIZE, x.item())\n"
                for i, k in enumerate(kernels)
            }
        )
        outputs = sorted(cell.stdout for cell in done.values())
        assert outputs == ["[rank 0] 0 2 3.0\n", "[rank 1] 1 2 3.0\n"], [c.traceback for c in done.values()]
    # One node's rank fails: the other node's kernel stops its ranks instead of waiting.
    endpoint = f"localhost:{_free_port()}"
    started = time.monotonic()
    done = run_together(
        {
            k: f"%%ddp_launch -n 1 --nnodes 2 --rdzv-endpoint {endpoint} --node-rank {i}\n"
            "import time\nif RANK == 1:\n    raise ValueError('node 1 fails')\ntime.sleep(60)\n"
            for i, k in enumerate(kernels)
        }
    )
    assert time.monotonic() - started < 20
    assert "ValueError: node 1 fails" in done[other_kernel].traceback
    assert "the ranks of another node failed" in done[ddp_kernel].traceback


def test_the_cell_timeline_records_the_ranks_of_a_ddp_cell(ddp_kernel: Kernel) -> None:
    """Each rank measures its own allocator in the cell; on the CPU there is none to report."""
    assert (
        ddp_kernel.run(
            "from jupyter_gpu.kernel import timeline\n_undo = timeline.register(get_ipython())"
        ).error
        is None
    )
    try:
        assert ddp_kernel.run(ALL_REDUCE).error is None
        cell = ddp_kernel.run(LAST_RECORD)
        assert cell.error is None, cell.traceback
        assert cell.stdout.strip() == '["ok", [{"rank": 0, "gpus": []}, {"rank": 1, "gpus": []}]]'
        assert ddp_kernel.run("1 + 1").error is None
        cell = ddp_kernel.run(LAST_RECORD)  # a cell of the kernel's own: no ranks
        assert cell.stdout.strip() == '["ok", []]'
    finally:
        ddp_kernel.run("_undo()")
