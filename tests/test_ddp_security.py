"""The DDP session against processes of its own user and against the network.

Another uid is kept out by permissions (``test_ddp_privacy.py``); here: nothing of a
single-node session listens beyond loopback, a process of the same user without the session's
key cannot join its channel, and an abort between nodes must be signed with the shared secret.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from multiprocessing.connection import AuthenticationError, Client
from pathlib import Path

import pytest
from support.ddp_kernel import Kernel, no_ranks_left
from support.processes import listeners

from jupyter_gpu.ddp.abort import abort_is_genuine, sign_abort
from jupyter_gpu.ddp.channel import KernelEnd, RankEnd

LOOPBACK = ("127.0.0.1", "::1")


class Payload:
    """A pickle that writes a file when it is loaded: proof that planted data was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


CHANNEL_PATH = "print(get_ipython().magics_manager.registry['DDPMagics'].session.gang.channel.path)"


@pytest.fixture()
def session(ddp_kernel: Kernel) -> Iterator[Kernel]:
    """A running ``%ddp_start -n 2``."""
    cell = ddp_kernel.run("%ddp_start -n 2")
    assert cell.error is None, cell.traceback
    yield ddp_kernel
    ddp_kernel.run("%ddp_stop")
    assert no_ranks_left(ddp_kernel.pid)


def test_nothing_of_a_single_node_session_listens_beyond_loopback(session) -> None:  # type: ignore[no-untyped-def]
    kernel = session
    assert all(ip in LOOPBACK for ip, _ in listeners(kernel.pid)), listeners(kernel.pid)
    # gloo's pairs, the ranks' own sockets: also on loopback once a collective ran
    cell = kernel.run("%%ddp\nx = torch.ones(1)\ndist.all_reduce(x)\n")
    assert cell.error is None, cell.traceback
    assert all(ip in LOOPBACK for ip, _ in listeners(kernel.pid)), listeners(kernel.pid)


def test_the_channel_takes_no_client_without_the_session_key(session, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A process that can reach the socket (the same user, or root) but has no key: refused
    before anything is unpickled, and the session goes on."""
    kernel = session
    path = kernel.run(CHANNEL_PATH).stdout.strip()
    marker = tmp_path / "ran"
    with pytest.raises((AuthenticationError, OSError)):
        conn = Client(path, "AF_UNIX", authkey=b"x" * 32)
        conn.send(Payload(marker))
    cell = kernel.run("%%ddp --return y\ny = RANK\n", timeout=60)
    assert cell.error is None, cell.traceback
    assert kernel.run("print(_ddp)").stdout.strip() == "{0: 0, 1: 1}"
    assert not marker.exists()


def test_abort_must_be_signed_and_recent() -> None:
    started = time.time()
    assert abort_is_genuine(b"k" * 32, sign_abort(b"k" * 32), started)
    assert not abort_is_genuine(b"k" * 32, b"1", started)
    assert not abort_is_genuine(b"k" * 32, sign_abort(b"x" * 32), started)  # a stranger's key
    # an abort captured from an earlier run, replayed
    assert not abort_is_genuine(b"k" * 32, sign_abort(b"k" * 32), started + 3600)


def test_a_client_without_the_key_is_refused_while_the_ranks_connect(tmp_path: Path) -> None:
    """Before every rank has connected the socket exists: a keyless client is turned away at
    the challenge, and the real rank then gets the commands queued for it."""
    marker = tmp_path / "ran"
    kernel_end = KernelEnd(str(tmp_path), b"k" * 32, 1)
    kernel_end.send(1, {"kind": "cell"})
    with pytest.raises(AuthenticationError):
        Client(kernel_end.path, "AF_UNIX", authkey=b"x" * 32).send(Payload(marker))
    rank = RankEnd(kernel_end.path, b"k" * 32, 0)
    assert rank.next() == (1, {"kind": "cell"})
    rank.reply(1, "done")
    assert kernel_end.receive(1, [0], 5.0) == [(0, "done")]
    kernel_end.close()
    assert not marker.exists() and not os.path.exists(kernel_end.path)
