"""The channel of a ``--slurm`` launch (TCP, TLS, the session key: ``jupyter_gpu/ddp/tls.py``)
against the network: a relay between a rank and the kernel sees no cell, object or key; a plain
TCP client, a TLS client without the key and one that sends a huge message before the challenge
are dropped (and the ranks still get in); a flood of silent connections holds a bounded number
of handshakes and the rank still gets in; a peer trickling its answer is cut off at the
handshake's deadline; a kernel with another certificate is refused by the rank. Real sockets on
loopback, no Slurm needed."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from pathlib import Path

import pytest
from support.waiting import wait_until

from jupyter_gpu.ddp import tls
from jupyter_gpu.ddp.channel import KernelEnd, RankEnd
from jupyter_gpu.ddp.protocol import Command

KEY = b"k" * 32
CANARY = "canary-9f2c41e0d7b3"


class Relay:
    """A TCP relay to ``target`` that keeps every byte it passes, both ways: what a machine on
    the path between a rank and the kernel would capture."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.captured = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            client, _ = self.server.accept()
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                with self._lock:
                    self.captured += data
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def kernel_end(tmp_path: Path) -> Iterator[KernelEnd]:
    end = KernelEnd(str(tmp_path), KEY, 1, host="127.0.0.1")
    yield end
    end.close()


def _roundtrip(kernel_end: KernelEnd, rank: RankEnd) -> None:
    """The kernel sends the canary, the rank gets it and answers."""
    kernel_end.send(1, Command("cell", source=f"print({CANARY!r})"))
    seq, command = rank.next()
    assert (seq, command.source) == (1, f"print({CANARY!r})")
    rank.reply(1, f"done {CANARY}")
    got = wait_until("the rank's reply", lambda: kernel_end.receive(1, [0], 0.05), timeout=30)
    assert got == [(0, f"done {CANARY}")]


def test_a_relay_between_rank_and_kernel_captures_nothing_it_can_read(kernel_end: KernelEnd) -> None:
    relay = Relay(kernel_end.path)
    assert kernel_end.pin is not None
    try:
        _roundtrip(kernel_end, RankEnd(relay.address, KEY, 0, kernel_end.pin))
    finally:
        relay.close()
    assert len(relay.captured) > 200  # TLS records went through it
    assert CANARY.encode() not in relay.captured
    assert KEY not in relay.captured and KEY.hex().encode() not in relay.captured


def test_plain_tcp_and_tls_without_the_key_are_dropped_and_the_rank_still_gets_in(
    kernel_end: KernelEnd,
) -> None:
    host, _, port = kernel_end.path.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as plain:
        plain.sendall(b"GET / HTTP/1.0\r\n\r\n" + struct.pack("!Q", 1 << 40))
        assert _read_all(plain) == b""  # not TLS: closed, not a byte said
    assert kernel_end.pin is not None
    with pytest.raises((AuthenticationError, EOFError, OSError)):
        tls.connect(kernel_end.path, b"x" * 32, kernel_end.pin, 30)
    _roundtrip(kernel_end, RankEnd(kernel_end.path, KEY, 0, kernel_end.pin))


def test_a_huge_message_before_the_challenge_is_refused_unread(kernel_end: KernelEnd) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    host, _, port = kernel_end.path.rpartition(":")
    with context.wrap_socket(socket.create_connection((host, int(port)), timeout=30)) as stranger:
        challenge = tls.Framed(stranger).recv_bytes(tls.PRE_AUTH_MAX)  # random: nothing to learn
        assert challenge.startswith(b"#CHALLENGE#") and CANARY.encode() not in challenge
        stranger.sendall(struct.pack("!Q", 1 << 40) + b"x" * 1000)
        assert _read_all(stranger) == b""


def test_a_rank_refuses_a_kernel_with_another_certificate(kernel_end: KernelEnd, tmp_path: Path) -> None:
    (tmp_path / "impostor").mkdir()
    impostor = tls.TlsListener("127.0.0.1", KEY, tls.new_certificate(), str(tmp_path / "impostor"))
    assert kernel_end.pin is not None
    try:
        with pytest.raises(AuthenticationError, match="not this session's kernel"):
            RankEnd(impostor.address, KEY, 0, kernel_end.pin)
    finally:
        impostor.close()


def test_a_channel_stops_listening_once_closed_and_leaves_no_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    end = KernelEnd(str(tmp_path), KEY, 1, host="127.0.0.1")
    (listening,) = [t for t in set(threading.enumerate()) - before if t.name == "ddp-channel-tcp"]
    _roundtrip(end, RankEnd(end.path, KEY, 0, end.pin))
    end.close()
    wait_until("the listener's thread to end", lambda: not listening.is_alive(), timeout=10)
    host, _, port = end.path.rpartition(":")
    with pytest.raises(ConnectionRefusedError):  # the port is free: nothing of this session answers
        socket.create_connection((host, int(port)), timeout=5).close()


def _handshake_threads() -> int:
    return sum(t.name == "ddp-channel-auth" for t in threading.enumerate())


def test_a_flood_of_silent_connections_holds_no_more_than_its_share_and_the_rank_gets_in(
    kernel_end: KernelEnd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls, "HANDSHAKE_TIMEOUT_S", 1.0)  # the deadline, shortened for the test
    host, _, port = kernel_end.path.rpartition(":")
    flood = [socket.create_connection((host, int(port)), timeout=30) for _ in range(tls.MAX_HANDSHAKES + 200)]
    try:
        wait_until(
            "the listener to take its share", lambda: _handshake_threads() >= tls.MAX_HANDSHAKES, timeout=30
        )
        assert _handshake_threads() <= tls.MAX_HANDSHAKES  # the rest wait in the listen queue
        assert kernel_end.pin is not None
        # queued behind the strangers, the rank gets its turn as their deadlines pass
        _roundtrip(kernel_end, RankEnd(kernel_end.path, KEY, 0, kernel_end.pin))
    finally:
        for sock in flood:
            sock.close()


def test_a_peer_trickling_its_answer_is_cut_off_at_the_deadline(
    kernel_end: KernelEnd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls, "HANDSHAKE_TIMEOUT_S", 1.0)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    host, _, port = kernel_end.path.rpartition(":")
    with context.wrap_socket(socket.create_connection((host, int(port)), timeout=30)) as stranger:
        tls.Framed(stranger).recv_bytes(tls.PRE_AUTH_MAX)
        sent = 0
        with contextlib.suppress(OSError):
            # one byte of an answer a record at a time, each well within a read's timeout
            while sent < tls.PRE_AUTH_MAX and not _closed(stranger):
                stranger.sendall(b"\0")
                sent += 1
        # ~0.2 s a byte: cut off after about 5 bytes, long before a whole answer's 264
        assert sent < 20, f"still connected after {sent} bytes"


def _closed(sock: ssl.SSLSocket) -> bool:
    """Whether the kernel closed the connection, waiting 0.2 s for it to say so."""
    sock.settimeout(0.2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        return True


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    return data
