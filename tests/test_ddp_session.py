"""Persistent ranks (%ddp_start … %%ddp … %ddp_stop) in a real kernel on CPU with gloo."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator

import pytest
from support.ddp_kernel import LAST_RECORD, Cell, Kernel, no_ranks_left, rank_processes, wait_gone


@pytest.fixture()
def session(ddp_kernel: Kernel) -> Iterator[Kernel]:
    cell = ddp_kernel.run("%ddp_start -n 2")
    assert cell.error is None and "2 ranks ready (gloo on cpu)" in cell.stdout, cell.traceback or cell.stderr
    yield ddp_kernel
    ddp_kernel.run("%ddp_stop")
    assert no_ranks_left(ddp_kernel.pid)


def test_namespace_push_pull_and_status(session: Kernel) -> None:
    assert session.run("%%ddp\ncounter = RANK * 10\n").error is None
    cell = session.run("%%ddp --return counter --output all\ncounter += 1\nprint(counter)\n")
    assert cell.error is None, cell.traceback
    assert sorted(cell.stdout.splitlines()) == ["[rank 0] 1", "[rank 1] 11"]
    assert session.run("print(_ddp)").stdout.strip() == "{0: 1, 1: 11}"

    session.run("def f(x):\n    return x + 100\nz = 5\n")
    assert session.run("%ddp_push f z").error is None
    session.run("%%ddp --return y\ny = f(z) + RANK\n")
    assert session.run("print(_ddp)").stdout.strip() == "{0: 105, 1: 106}"

    assert session.run("%ddp_pull counter").value() == "{0: 1, 1: 11}"
    assert session.run("%ddp_pull counter z").value() == "{'counter': {0: 1, 1: 11}, 'z': {0: 5, 1: 5}}"
    status = session.run("%ddp_status").stdout
    assert "rank 0: pid" in status and "rank 1: pid" in status and "cells run: 3" in status


def test_a_cell_costs_milliseconds(session: Kernel) -> None:
    session.run("%%ddp\nx = 1\n")
    cell = session.run(
        "import time\nt0 = time.perf_counter()\nfor _ in range(20):\n"
        "    get_ipython().run_cell_magic('ddp', '', 'x += 1')\n"
        "print((time.perf_counter() - t0) / 20)\n"
    )
    assert cell.error is None, cell.traceback
    assert float(cell.stdout) < 0.1  # ~5 ms on an idle machine; CI machines are not idle


def test_late_output_lands_in_the_ddp_cell_not_in_a_later_one(session: Kernel) -> None:
    ddp_cell = session.run(
        "%%ddp\nimport threading\nthreading.Timer(1.0, lambda: print('late line', flush=True)).start()\n"
    )
    other = session.run("import time\ntime.sleep(2)\nprint('other cell')\n")
    session.pump(0.5)
    assert "late line" not in other.stdout
    assert "late line" in Cell(session, ddp_cell.msg_id).stdout


def test_a_failure_without_a_collective_keeps_the_ranks(session: Kernel) -> None:
    session.run("%%ddp\nkept = RANK\n")
    cell = session.run("%%ddp\nif RANK == 1:\n    raise KeyError('only rank 1')\n")
    assert cell.error is not None and "Error on rank 1:" in cell.traceback
    assert "line 3\n    raise KeyError('only rank 1')" in cell.traceback
    assert "%ddp_restart" not in cell.traceback
    assert session.run("%ddp_pull kept").value() == "{0: 0, 1: 1}"


def test_a_failure_while_peers_wait_in_a_collective_needs_a_restart(session: Kernel) -> None:
    session.run("%%ddp\nkept = 1\n")
    started = time.monotonic()
    cell = session.run(
        textwrap.dedent("""\
        %%ddp
        if RANK == 0:
            raise ValueError("rank 0 gives up")
        dist.barrier()
        """)
    )
    assert time.monotonic() - started < 5
    tb = cell.traceback
    assert "Error on rank 0:" in tb and 'line 3\n    raise ValueError("rank 0 gives up")' in tb
    assert "rank 1 did not respond" in tb and "%ddp_restart" in tb
    assert "stopped" in session.run("%ddp_status").stdout
    assert "No running ranks" in session.run("%%ddp\nprint(1)\n").traceback
    assert session.run("%ddp_restart").error is None
    cell = session.run("%%ddp --output all\nprint('kept' in globals())\n")
    assert sorted(cell.stdout.splitlines()) == ["[rank 0] False", "[rank 1] False"]


def test_interrupt_stops_the_cell_and_keeps_the_ranks(session: Kernel) -> None:
    session.run("%%ddp\nkept = RANK + 7\n")
    pids = {p.pid for p in rank_processes(session.pid)}
    msg_id = session.submit("%%ddp\nimport time\nprint('sleeping', flush=True)\ntime.sleep(60)\n")
    session.wait_for_text(msg_id, "sleeping")
    session.km.interrupt_kernel()
    cell = Cell(session, msg_id)
    session.wait(msg_id, timeout=15)
    assert cell.error is not None and cell.error["ename"] == "DDPInterrupted"
    assert "rank 0 stopped at line 4" in cell.traceback and "rank 1 stopped at line 4" in cell.traceback
    assert {p.pid for p in rank_processes(session.pid)} == pids
    assert session.run("%ddp_pull kept").value() == "{0: 7, 1: 8}"


def test_timeout_interrupts_the_cell(session: Kernel) -> None:
    cell = session.run("%%ddp --timeout 1\nimport time\ntime.sleep(60)\n", timeout=30)
    assert cell.error is not None and "timed out after 1 s" in cell.traceback
    assert session.run("%%ddp\nprint('next')\n").stdout == "next\n"


def test_a_cell_that_ignores_the_interrupt_still_returns_at_its_timeout(session: Kernel) -> None:
    """The grace before giving up on the ranks is part of --timeout (5 s used to return after 8)."""
    started = time.monotonic()
    cell = session.run(
        textwrap.dedent("""\
        %%ddp --timeout 4
        import signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        time.sleep(60)
        """),
        timeout=30,
    )
    elapsed = time.monotonic() - started
    assert cell.error is not None and "timed out after 4 s" in cell.traceback
    assert "did not respond" in cell.traceback and "%ddp_restart" in cell.traceback
    assert elapsed < 4 + 1.5, f"returned after {elapsed:.1f} s"
    assert session.run("%ddp_restart").error is None


def test_a_rank_whose_channel_is_cut_ends_the_cell_at_once_with_its_name(session: Kernel) -> None:
    """No reply can go missing silently: a rank whose end of the channel closes (here its own
    cell closes it) is named within seconds, not waited for as if blocked in a collective."""
    started = time.monotonic()
    cell = session.run(
        textwrap.dedent("""\
        %%ddp
        import gc, multiprocessing.connection
        if RANK == 1:
            for c in gc.get_objects():
                if isinstance(c, multiprocessing.connection.Connection):
                    c.close()
        """),
        timeout=60,
    )
    assert cell.error is not None
    assert "rank 1" in cell.traceback and "blocked in a collective" not in cell.traceback
    assert time.monotonic() - started < 20
    assert session.run("%ddp_restart").error is None
    assert session.run("%%ddp --return y\ny = RANK").error is None


def test_a_second_start_is_refused(session: Kernel) -> None:
    assert session.run("%ddp_start -n 2").stderr.startswith("UsageError: DDP ranks are already running")


def test_ranks_die_with_the_kernel() -> None:
    kernel = Kernel()
    try:
        kernel.run("%ddp_start -n 2")
        pids = [p.pid for p in rank_processes(kernel.pid)]
        assert len(pids) == 2  # the two ranks: nothing serves a store for a session on one node
        os.kill(kernel.pid, signal.SIGKILL)
        assert wait_gone(pids, 5) == []
    finally:
        kernel.close()


def test_the_cell_timeline_records_the_ranks_of_a_persistent_cell(session: Kernel) -> None:
    assert (
        session.run("from jupyter_gpu.kernel import timeline\n_undo = timeline.register(get_ipython())").error
        is None
    )
    try:
        assert session.run("%%ddp\nx = RANK").error is None
        cell = session.run(LAST_RECORD)
        assert cell.stdout.strip() == '["ok", [{"rank": 0, "gpus": []}, {"rank": 1, "gpus": []}]]', (
            cell.traceback
        )
    finally:
        session.run("_undo()")
