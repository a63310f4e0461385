"""Another user on a shared machine against a live DDP session: it must not run code or decide.

The attacker knows no secret. It does what one did in the security review: find the session's
store from the ports that appear when the ranks start, connect as a plain ``TCPStore`` client,
list the keys, plant commands and replies that run code when unpickled, and set the abort key.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from _ddp_kernel import Kernel, ddp_kernel, no_ranks_left  # noqa: F401 - ddp_kernel is a fixture

from jupyter_gpu.kernel.ddp.channel import Channel

LOOPBACK = ("127.0.0.1", "::1")


class Payload:
    """A pickle that writes a file when it is loaded: proof that planted data was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def listeners(pid: int) -> set[tuple[str, int]]:
    """Every TCP listening address of ``pid`` and its descendants (forkserver, store, ranks)."""
    found = set()
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for proc in procs:
        try:
            found |= {
                (c.laddr.ip, c.laddr.port)
                for c in proc.net_connections("inet")
                if c.status == psutil.CONN_LISTEN
            }
        except psutil.NoSuchProcess:
            continue
    return found


STORE_PORT = "print(get_ipython().magics_manager.registry['DDPMagics'].session.gang._host.port)"


def store_port(kernel: Kernel) -> int:
    """The session store's port. No secret: anyone sees it appear in /proc/net/tcp and can probe
    it; asking the kernel only saves the test that probing."""
    return int(kernel.run(STORE_PORT).stdout)


@pytest.fixture()
def session(ddp_kernel: Kernel) -> Iterator[tuple[Kernel, int]]:
    """A running ``%ddp_start -n 2`` and its store's port."""
    cell = ddp_kernel.run("%ddp_start -n 2")
    assert cell.error is None, cell.traceback
    yield ddp_kernel, store_port(ddp_kernel)
    ddp_kernel.run("%ddp_stop")
    assert no_ranks_left(ddp_kernel.pid)


def test_nothing_of_a_single_node_session_listens_beyond_loopback(session) -> None:  # type: ignore[no-untyped-def]
    kernel, port = session
    assert ("127.0.0.1", port) in listeners(kernel.pid)
    assert all(ip in LOOPBACK for ip, _ in listeners(kernel.pid)), listeners(kernel.pid)
    # gloo's pairs, the ranks' own sockets: also on loopback once a collective ran
    cell = kernel.run("%%ddp\nx = torch.ones(1)\ndist.all_reduce(x)\n")
    assert cell.error is None, cell.traceback
    assert all(ip in LOOPBACK for ip, _ in listeners(kernel.pid)), listeners(kernel.pid)


def attacker_store(port: int):  # type: ignore[no-untyped-def]
    """A plain client of the session's store, knowing no secret."""
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=5))


def plant(store, payload: Payload, seqs: range) -> None:  # type: ignore[no-untyped-def]
    """Commands for the ranks and replies for the kernel that run code when unpickled, and an abort."""
    keys = store.list_keys()
    prefixes = {k.rsplit("/reply/", 1)[0] for k in keys if "/reply/" in k}
    assert prefixes, keys
    evil = pickle.dumps(payload)
    for prefix in prefixes:
        for seq in seqs:
            store.set(f"{prefix}/cmd/{seq}", evil)  # a bare pickle
            for rank in (0, 1):  # and one behind a made-up tag, in case only a length is checked
                store.set(f"{prefix}/reply/{seq}/{rank}", b"\0" * 32 + evil)
            store.add(f"{prefix}/replies/{seq}", 1)
    store.set("jupyter_gpu/ddp/abort", b"1")


def test_planted_commands_replies_and_abort_run_nothing(session, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    kernel, port = session
    marker = tmp_path / "ran"
    plant(attacker_store(port), Payload(marker), range(1, 6))

    cell = kernel.run("%%ddp --return y --output all\ny = RANK + 41\n", timeout=60)
    assert cell.error is None, cell.traceback
    assert kernel.run("print(_ddp)").stdout.strip() == "{0: 41, 1: 42}"
    assert not marker.exists()
    assert "did not sign" in cell.stderr + cell.stdout  # dropped, and the user is told
    # and the session is still the owner's: the next cell runs as well
    cell = kernel.run("%%ddp --return y\ny = RANK\n", timeout=60)
    assert cell.error is None, cell.traceback
    assert kernel.run("print(_ddp)").stdout.strip() == "{0: 0, 1: 1}"


def test_filling_the_store_costs_the_session_not_the_kernel(session) -> None:  # type: ignore[no-untyped-def]
    """Whatever is written into the store is held by the process serving it: not the kernel,
    whose memory (and the notebook's state) a stranger could otherwise exhaust."""
    kernel, port = session
    kernel_rss = psutil.Process(kernel.pid).memory_info().rss
    store = attacker_store(port)
    for i in range(16):
        store.set(f"junk/{i}", b"\xff" * (8 << 20))  # 128 MiB in all
    assert psutil.Process(kernel.pid).memory_info().rss - kernel_rss < 32 << 20
    cell = kernel.run("%%ddp --return y\ny = RANK\n", timeout=60)
    assert cell.error is None, cell.traceback


class _DictStore:
    """Enough of a c10d store for the channel, in memory."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)


def test_forged_replayed_and_foreign_messages_are_not_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    store = _DictStore()
    ours = Channel(store, b"k" * 32, "s1", "kernel")
    ours.put("cmd/1", {"kind": "cell"})
    assert ours.take("cmd/1") == {"kind": "cell"}
    evil = pickle.dumps(Payload(marker))

    store.set("cmd/2", evil)  # unsigned
    assert ours.take("cmd/2") is None
    store.set("cmd/3", store.get("cmd/1"))  # a genuine message replayed under another key
    assert ours.take("cmd/3") is None
    genuine = store.get("cmd/1")
    store.set("cmd/4", genuine[:32] + evil)  # a genuine tag on another payload
    assert ours.take("cmd/4") is None
    theirs = Channel(store, b"x" * 32, "s1", "attacker")  # signed, with another secret
    theirs.put("cmd/5", Payload(marker))
    assert ours.take("cmd/5") is None
    other_session = Channel(store, b"k" * 32, "s2", "kernel")  # same secret, other session
    other_session.put("cmd/6", {"kind": "cell"})
    assert ours.take("cmd/6") is None
    assert not marker.exists()
    assert ours.dropped == 5


def test_abort_must_be_signed_and_recent() -> None:
    store = _DictStore()
    node = Channel(store, b"k" * 32, "abort", "kernel")
    started = time.time()
    assert node.abort_is_genuine("abort", node.sign_abort("abort"), started)
    assert not node.abort_is_genuine("abort", b"1", started)
    stranger = Channel(store, b"x" * 32, "abort", "attacker")
    assert not node.abort_is_genuine("abort", stranger.sign_abort("abort"), started)
    # an abort captured from an earlier run, replayed
    assert not node.abort_is_genuine("abort", node.sign_abort("abort"), started + 3600)
