"""The private channel between a kernel and the ranks it started.

Commands (cell source, pushed objects) and replies (returned values, errors) travel over a Unix
socket in the session's own directory (``mkdtemp``: mode 0700), so no other uid can connect, and
each connection must also answer ``multiprocessing.connection``'s HMAC challenge with the
session's key, which reaches the ranks only through the process launcher. On one node nothing
of a session is in torch's store, on a TCP port, or in a file another user can read: what is
sent can be unpickled because only this user's processes holding the key can be at the other end.

Ranks on other nodes (``--slurm``) reach the kernel over TCP instead: TLS with a per-session
certificate they pin, and the same challenge inside (``tls.py``); the port closes once every
rank is in. Everything above the transport is the same.

Messages are ``(seq, payload)`` pickles: a reply that arrives after its cell was given up (an
interrupt, a timeout) is recognised by its number and dropped.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Client, Connection, Listener, wait
from typing import Any

from . import tls

SOCKET_NAME = "channel"
# A rank's connection must be up within this long of its start, else the rank gives up (the
# kernel sees it exit): the accept thread has nothing else to do.
CONNECT_TIMEOUT_S = 120.0


def new_key() -> bytes:
    """A fresh key for one session's channel."""
    return secrets.token_bytes(32)


class KernelEnd:
    """The kernel's side: accepts one connection per rank it serves, sends commands, takes replies.

    ``host`` None: a Unix socket in ``session_dir`` (the ranks are on this node); else a TLS
    port on ``host`` (an address the nodes reach), whose certificate's fingerprint is ``pin``."""

    def __init__(self, session_dir: str, key: bytes, ranks: int, host: str | None = None) -> None:
        self._listener: Listener | tls.TlsListener
        self.pin: bytes | None = None
        if host is None:
            self.path = os.path.join(session_dir, SOCKET_NAME)
            self._listener = Listener(self.path, "AF_UNIX", authkey=key)
        else:
            certificate = tls.new_certificate()
            self._listener = tls.TlsListener(host, key, certificate, session_dir)
            self.path = self._listener.address
            self.pin = certificate.fingerprint
        self._expected = ranks
        self._lock = threading.Lock()
        self._conns: dict[int, Connection | tls.Framed] = {}  # local rank -> its connection
        self._queued: list[bytes] = []  # sent before every rank connected: replayed on connect
        self.lost: set[int] = set()  # local ranks whose connection closed
        self._closed = False
        threading.Thread(target=self._accept, name="ddp-channel-accept", daemon=True).start()

    def _accept(self) -> None:
        while len(self._conns) < self._expected:
            try:
                conn = self._listener.accept()  # the HMAC challenge happens here
                local = conn.recv()
            except Exception:  # a closed listener (the gang stopped) or a failed handshake
                if self._closed:
                    return
                continue
            if not isinstance(local, int) or not 0 <= local < self._expected or local in self._conns:
                conn.close()
                continue
            with self._lock:
                for blob in self._queued:
                    conn.send_bytes(blob)
                self._conns[local] = conn
                if len(self._conns) == self._expected:
                    self._queued.clear()
        with contextlib.suppress(OSError):
            self._listener.close()

    def send(self, seq: int, payload: Any) -> None:
        """``payload`` to every local rank (now, or when it connects)."""
        blob = pickle.dumps((seq, payload), protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:  # queue and snapshot together: a rank connecting now gets it exactly once
            if len(self._conns) < self._expected:
                self._queued.append(blob)
            targets = [(local, conn) for local, conn in self._conns.items() if local not in self.lost]
        # Written outside the lock: a rank busy in a long cell fills the socket's buffer, and
        # ``close`` (stopping the gang) must not wait behind a write that waits on that rank.
        for local, conn in targets:
            try:
                conn.send_bytes(blob)
            except OSError:
                self.lost.add(local)

    def receive(self, seq: int, locals_: Iterable[int], timeout: float) -> list[tuple[int, Any]]:
        """Replies to ``seq`` from the given local ranks that arrive within ``timeout``; older
        replies (of a cell given up) are dropped. A rank whose connection closed joins ``lost``."""
        with self._lock:
            conns = {
                c: local for local, c in self._conns.items() if local in locals_ and local not in self.lost
            }
        if not conns:  # none connected yet (or all lost): the caller still waits its turn
            time.sleep(timeout)
            return []
        found = []
        buffered = [c for c in conns if isinstance(c, tls.Framed) and c.pending()]  # TLS has read ahead
        for conn in buffered or wait(list(conns), timeout):  # type: ignore[arg-type]
            local = conns[conn]  # type: ignore[index]
            try:
                got, payload = pickle.loads(conn.recv_bytes())  # type: ignore[union-attr]
            except (EOFError, OSError):
                self.lost.add(local)
                continue
            if got == seq:
                found.append((local, payload))
        return found

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
        if self.pin is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


class RankEnd:
    """A rank's side: connect, say which of the kernel's ranks it is, then take commands and reply.

    ``pin`` None: ``path`` is the kernel's Unix socket; else ``host:port`` of its TLS port."""

    def __init__(self, path: str, key: bytes, local_rank: int, pin: bytes | None = None) -> None:
        self._conn: Connection | tls.Framed
        if pin is None:
            self._conn = Client(path, "AF_UNIX", authkey=key)
        else:
            self._conn = tls.connect(path, key, pin, CONNECT_TIMEOUT_S)
        self._conn.send(local_rank)

    def next(self) -> tuple[int, Any]:
        """The next ``(seq, command)``; EOFError when the kernel has gone."""
        return pickle.loads(self._conn.recv_bytes())

    def reply(self, seq: int, payload: Any) -> None:
        self._conn.send_bytes(pickle.dumps((seq, payload), protocol=pickle.HIGHEST_PROTOCOL))
