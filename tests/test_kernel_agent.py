"""The kernel agent: what it writes, how, and what it never touches (torch import, CUDA init)."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_torch import UUID0, FakeCuda, install
from support.ipython_shell import shared_shell
from support.kernel_client import RealKernel
from support.waiting import wait_until

from jupyter_gpu import runtime_dir
from jupyter_gpu.analysis.stats_file import file_name
from jupyter_gpu.kernel import agent as agent_module
from jupyter_gpu.kernel.agent import KernelAgent
from jupyter_gpu.runtime_dir import beside_connection
from jupyter_gpu.server.kernel_stats import read_kernel_stats

REPO = Path(__file__).resolve().parent.parent


KID = "0b0e9a63-1f3c-4c1e-9d2a-7f6a5e4d3c2b"


@pytest.fixture
def agent(tmp_path: Path):
    made: list[KernelAgent] = []

    def make(**kwargs) -> KernelAgent:
        a = KernelAgent(tmp_path / file_name(KID), KID, **kwargs)
        made.append(a)
        return a

    yield make
    for a in made:
        a.stop()


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_before_cuda_writes_no_cuda_in_use(agent, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    a = agent()
    a.publish()
    doc = _read(a.path)
    assert doc["cuda_in_use"] is False and doc["devices"] == []
    assert doc["kernel_id"] == KID and doc["pid"] == os.getpid() and doc["version"] == 1
    assert stat.S_IMODE(a.path.stat().st_mode) == 0o600
    # What the agent writes is what the server accepts.
    stats, reason = read_kernel_stats(a.path.parent, KID)[:2]
    assert reason is None and stats["cuda_in_use"] is False


def test_torch_imported_but_cuda_not_initialised(agent, monkeypatch) -> None:
    cuda = FakeCuda(initialized=False)
    install(monkeypatch, cuda)
    a = agent()
    a.publish()
    assert _read(a.path)["cuda_in_use"] is False
    # Only the harmless check ran: nothing that initialises CUDA or creates a context.
    assert set(cuda.calls) == {"is_initialized"}


def test_cuda_figures_from_fixture(agent, monkeypatch) -> None:
    cuda = FakeCuda()
    install(monkeypatch, cuda)
    a = agent(clock=lambda: 1_760_000_000.0)
    a.publish()
    doc = _read(a.path)
    assert doc["cuda_in_use"] is True
    assert len(doc["devices"]) == 1  # device 1 never reserved anything
    d = doc["devices"][0]
    assert d["index"] == 0 and d["uuid"] == f"GPU-{UUID0}"
    assert d["reserved_bytes"] == 2_669_674_496
    assert d["allocated_bytes"] == d["active_bytes"] == 1_259_148_288
    assert d["requested_bytes"] == 1_238_401_337
    assert d["inactive_split_bytes"] == 399_698_944
    assert d["reserved_unallocated_bytes"] == 1_410_526_208
    assert d["fragmentation"] == pytest.approx(399_698_944 / 2_669_674_496)
    assert (d["num_alloc_retries"], d["num_ooms"]) == (0, 0)
    assert d["peak_allocated_bytes"] == 2_424_527_360
    assert d["largest_free_block_bytes"] == {"large": 23_068_672, "small": 1_135_616}
    assert d["segments"] == 144
    assert d["snapshot_time"] == 1_760_000_000.0
    assert d["expandable_segments"] is False
    # Snapshots without allocation history, and not again before snapshot_interval.
    a.publish()
    assert cuda.calls["memory_snapshot(include_traces=False)"] == 1
    assert cuda.calls["_snapshot"] == 0


def test_emptied_cache_reads_zero_segments(agent, monkeypatch) -> None:
    cuda = FakeCuda()
    cuda.segments = []
    install(monkeypatch, cuda)
    a = agent()
    a.publish()
    d = _read(a.path)["devices"][0]
    assert d["segments"] == 0 and d["largest_free_block_bytes"] == {"large": 0, "small": 0}


def test_older_torch_uses_private_snapshot(agent, monkeypatch) -> None:
    cuda = FakeCuda(include_traces=False)
    install(monkeypatch, cuda)
    a = agent()
    a.publish()
    assert cuda.calls["_snapshot"] == 1 and cuda.calls["memory_snapshot(legacy)"] == 0
    assert _read(a.path)["devices"][0]["segments"] == 144


def test_failing_snapshot_keeps_stats(agent, monkeypatch) -> None:
    cuda = FakeCuda()
    cuda.snapshot_error = RuntimeError("mempool_id must be a tuple of 2 integers")
    install(monkeypatch, cuda)
    a = agent()
    a.publish()
    d = _read(a.path)["devices"][0]
    assert d["reserved_bytes"] == 2_669_674_496
    assert d["largest_free_block_bytes"] is None and d["segments"] is None and d["snapshot_time"] is None


def test_slow_snapshot_stretches_its_interval(agent, monkeypatch) -> None:
    cuda = FakeCuda()
    real = cuda.memory_snapshot
    now = [1000.0]  # the agent's monotonic clock, moved by hand
    monkeypatch.setattr(agent_module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    def slow(mempool_id=None, include_traces=True):
        now[0] += 0.02  # this snapshot takes 20 ms
        return real(mempool_id, include_traces)

    cuda.memory_snapshot = slow
    install(monkeypatch, cuda)
    a = agent(snapshot_interval=1.0)
    taken = []
    for step in (0.0, 19.9, 0.2):  # publish now, 19.9 s later, 20.1 s later
        now[0] += step
        a.publish()
        taken.append(cuda.calls["memory_snapshot(include_traces=False)"])
    # 20 ms per snapshot, at most 0.1% of the time: none again for 20 s, not every second.
    assert taken == [1, 1, 2]


def test_configurable_from_ipython_config(tmp_path: Path) -> None:
    from traitlets.config import Config

    config = Config()
    config.KernelAgent.interval = 0.25
    config.KernelAgent.snapshot_interval = 30.0
    a = KernelAgent(tmp_path / file_name(KID), KID, config=config)
    assert (a.interval, a.snapshot_interval) == (0.25, 30.0)


def test_writes_are_atomic_and_leave_no_temp_files(agent, monkeypatch) -> None:
    install(monkeypatch, FakeCuda())
    writes = itertools.count(1)  # the agent's clock: each file carries the number of its write
    a = agent(interval=0.0005, snapshot_interval=0.0, clock=lambda: next(writes))
    a.start()
    wait_until("the agent's first write", a.path.exists)
    written, errors = 0, []
    deadline = time.monotonic() + 30
    while written < 200:  # read while the agent replaces the file 200 times
        assert time.monotonic() < deadline, f"the agent wrote only {written} times in 30 s"
        try:
            doc = json.loads(a.path.read_bytes())
            assert doc["devices"][0]["reserved_bytes"] == 2_669_674_496
            written = doc["time"]
        except FileNotFoundError:
            pass
        except Exception as error:  # a partial file
            errors.append(error)
    a.stop()
    assert errors == []
    assert not a.path.exists()
    assert list(a.path.parent.iterdir()) == []


def test_what_a_stranger_plants_at_a_temp_name_is_neither_followed_nor_published(
    agent, tmp_path: Path
) -> None:
    """A runtime dir others can write: the kernel's PID and id are public, so once the temp name
    was predictable (``.<name>.<pid>.tmp``), a symlink there redirected the write, a FIFO hung the
    writer and a file of the attacker's own was published under our name."""
    a = agent()
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    predictable = tmp_path / f".{a.path.name}.{os.getpid()}.tmp"
    predictable.symlink_to(victim)
    a.publish()
    assert victim.read_text() == "untouched"
    info = os.stat(a.path, follow_symlinks=False)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and info.st_mode & 0o077 == 0
    predictable.unlink()
    os.mkfifo(predictable, 0o666)
    publishing = threading.Thread(target=a.publish, daemon=True)
    publishing.start()
    publishing.join(timeout=5)
    if publishing.is_alive():  # free the blocked writer before failing
        os.close(os.open(predictable, os.O_RDONLY | os.O_NONBLOCK))
    assert not publishing.is_alive()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([a.path.name, predictable.name, "victim"])


def test_remove_spares_a_file_of_another_process(agent) -> None:
    a = agent()
    a.path.write_text(json.dumps({"pid": os.getpid() + 1}))
    a.stop()
    assert a.path.exists()


def test_a_fifo_planted_at_the_stats_name_does_not_hang_unload(agent) -> None:
    """%unload_ext and kernel exit read the file back before removing it: a FIFO blocked that read."""
    a = agent()
    os.mkfifo(a.path, 0o600)
    removing = threading.Thread(target=a.stop, daemon=True)
    removing.start()
    removing.join(timeout=5)
    if removing.is_alive():  # free the blocked reader before failing
        os.close(os.open(a.path, os.O_WRONLY))
    assert not removing.is_alive() and not a.path.exists()


def test_published_files_go_beside_the_connection_file(tmp_path: Path) -> None:
    kid = str(uuid.uuid4())
    path, found = beside_connection(file_name, str(tmp_path / f"kernel-{kid}.json"))
    assert found == kid and path == tmp_path.resolve() / f"jupyter_gpu-kernel-{kid}.json"
    assert beside_connection(file_name, str(tmp_path / "my-connection.json")) is None
    assert beside_connection(file_name, str(tmp_path / "kernel-../x.json")) is None


def test_register_in_a_shell_and_undo(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(runtime_dir, "connection_file", lambda: str(tmp_path / f"kernel-{KID}.json"))
    ip = shared_shell()
    threads = threading.active_count()
    undo = agent_module.register(ip)
    path = tmp_path / file_name(KID)
    wait_until("the agent's stats file", path.exists)
    assert _read(path)["cuda_in_use"] is False
    undo()
    assert not path.exists()
    assert threading.active_count() == threads


def test_register_outside_a_kernel_does_nothing(monkeypatch) -> None:
    monkeypatch.setattr(runtime_dir, "connection_file", lambda: None)
    threads = threading.active_count()
    undo = agent_module.register(shared_shell())
    assert threading.active_count() == threads
    undo()


# Prelude of the child processes: an agent whose clock counts its writes.
AGENT_WRITING = """
import itertools, json, time
from pathlib import Path
from jupyter_gpu.kernel.agent import KernelAgent

def third_write(folder):
    \"\"\"Start an agent; return its file once its thread has written it three times.\"\"\"
    agent = KernelAgent(Path(folder) / "f.json", "k", clock=itertools.count(1).__next__,
                        interval=0.01, snapshot_interval=0.01)
    agent.start()
    deadline = time.monotonic() + 30
    while True:
        doc = json.loads(agent.path.read_text()) if agent.path.exists() else {"time": 0}
        if doc["time"] >= 3:
            agent.stop()
            return doc
        if time.monotonic() > deadline:
            raise SystemExit("the agent did not write three times in 30 s")
        time.sleep(0.01)
"""


def _run_python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", AGENT_WRITING + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_agent_never_imports_torch(tmp_path: Path) -> None:
    out = _run_python(f"""
        import sys
        doc = third_write({str(tmp_path)!r})
        print(doc["cuda_in_use"], "torch" in sys.modules)
    """)
    assert out.split() == ["False", "False"]


def test_agent_does_not_initialise_cuda_after_torch_import(tmp_path: Path) -> None:
    """Spies on everything that would initialise CUDA or create a context."""
    out = _run_python(f"""
        import torch
        touched = []
        for name in ("init", "_lazy_init", "mem_get_info", "get_device_properties",
                     "current_device", "set_device", "synchronize", "memory_stats"):
            real = getattr(torch.cuda, name)
            def spy(*a, _n=name, _r=real, **k):
                touched.append(_n)
                return _r(*a, **k)
            setattr(torch.cuda, name, spy)
        doc = third_write({str(tmp_path)!r})
        print(doc["cuda_in_use"], torch.cuda.is_initialized(), touched)
    """)
    assert out.split() == ["False", "False", "[]"]


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[RealKernel]:
    """A real ipykernel with the repo on its path and its runtime dir in tmp_path."""
    kernel = RealKernel(tmp_path)
    yield kernel
    kernel.close()


def _stdout(kernel: RealKernel, code: str) -> str:
    cell = kernel.run(code)
    assert cell.ok, cell.shown
    return cell.stream()


def test_real_kernel(kernel: RealKernel, tmp_path: Path) -> None:
    kid, path = kernel.kernel_id, kernel.stats_file
    _stdout(kernel, "%load_ext jupyter_gpu")
    wait_until("the agent's stats file", path.exists, timeout=30)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stats, reason = read_kernel_stats(tmp_path, kid)[:2]
    assert reason is None and stats["cuda_in_use"] is False
    assert stats["pid"] == kernel.km.provisioner.pid
    imported_at = float(_stdout(kernel, "import time, torch; x = torch.ones(4); print(time.time())"))
    wait_until(
        "the agent to write again after torch was imported",
        lambda: (read_kernel_stats(tmp_path, kid).stats or {}).get("time", 0) > imported_at,
        timeout=30,
    )
    assert read_kernel_stats(tmp_path, kid).stats["cuda_in_use"] is False
    assert _stdout(kernel, "print(torch.cuda.is_initialized())").strip() == "False"
    _stdout(kernel, "%unload_ext jupyter_gpu")
    assert not path.exists()
    _stdout(kernel, "%load_ext jupyter_gpu")
    wait_until("the stats file after loading again", path.exists, timeout=30)
    kernel.km.shutdown_kernel(now=False)
    wait_until("the stats file to go with the kernel", lambda: not path.exists(), timeout=30)
