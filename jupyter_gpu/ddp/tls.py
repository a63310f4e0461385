"""The channel across nodes (``%%ddp_launch --slurm``): TCP with TLS and the session key.

On one node the channel is a Unix socket in a 0700 directory; across nodes it has to be a TCP
port, which anyone on the network can reach and whose traffic anyone on the path can read. So:

* TLS 1.3 with a certificate made for this session alone (never written outside the session's
  0700 directory); the ranks pin its SHA-256 fingerprint, so a man in the middle cannot pose as
  the kernel, and what travels (cells, pushed objects, replies) is encrypted;
* inside TLS, ``multiprocessing.connection``'s HMAC challenge both ways with the session key,
  so only the ranks this kernel started (they got the key through srun's environment, never a
  command line) get further: nothing is unpickled from a connection before that, and anything
  read before it is capped at ``PRE_AUTH_MAX`` bytes;
* each connection is shaken hands with in a thread of its own, under one deadline for TLS and
  the challenge together (a peer that trickles a byte at a time is cut off at it), and at most
  ``MAX_HANDSHAKES`` at once: more wait in the listen queue, so a flood of connections costs
  neither threads nor descriptors, and the accept loop outlives any error but closing.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import os
import pickle
import queue
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import answer_challenge, deliver_challenge
from typing import Any

HEADER = struct.Struct("!Q")
PRE_AUTH_MAX = 256  # what the HMAC challenge reads at most: a stranger cannot make us buffer more
HANDSHAKE_TIMEOUT_S = 10.0  # TLS and the challenge; a rank on a loaded node still makes it
# Handshakes at once; a rank queued behind strangers' gets its turn as their deadlines pass,
# well within its CONNECT_TIMEOUT_S.
MAX_HANDSHAKES = 64


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate for one session; ``fingerprint`` is the SHA-256 of its DER."""

    cert_pem: bytes
    key_pem: bytes
    fingerprint: bytes


def new_certificate() -> Certificate:
    """A fresh EC key and certificate: no CA is involved, the ranks trust the fingerprint."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jupyter-gpu ddp session")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))  # nodes' clocks may lag the kernel's
        .not_valid_after(now + datetime.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    der = cert.public_bytes(serialization.Encoding.DER)
    return Certificate(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        hashlib.sha256(der).digest(),
    )


class Framed:
    """Length-prefixed messages over a TLS socket, with the methods ``multiprocessing``'s
    challenge and ``wait`` use (``send_bytes``, ``recv_bytes(maxlength)``, ``fileno``)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def pending(self) -> bool:
        """Decrypted bytes wait in TLS's buffer: the socket may not look readable, yet a
        message (or its start) is here."""
        return self._sock.pending() > 0

    def send_bytes(self, data: bytes) -> None:
        self._sock.sendall(HEADER.pack(len(data)) + data)

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        (size,) = HEADER.unpack(self._exactly(HEADER.size))
        if maxlength is not None and size > maxlength:
            self.close()
            raise OSError(f"message of {size} bytes, more than the {maxlength} allowed here")
        return self._exactly(size)

    def _exactly(self, size: int) -> bytes:
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = self._sock.recv_into(view[got:], size - got)
            if n == 0:
                raise EOFError("the channel closed")
            got += n
        return bytes(buf)

    def send(self, obj: Any) -> None:
        self.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def recv(self) -> Any:
        return pickle.loads(self.recv_bytes())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


class TlsListener:
    """Accepts connections on ``host``; ``accept`` gives only those that passed TLS and the
    HMAC challenge with ``key``. ``address`` is ``host:port`` (the port the system chose)."""

    def __init__(self, host: str, key: bytes, certificate: Certificate, folder: str) -> None:
        self._key = key
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.minimum_version = ssl.TLSVersion.TLSv1_3
        cert_file, key_file = os.path.join(folder, "channel.crt"), os.path.join(folder, "channel.key")
        for path, data in ((cert_file, certificate.cert_pem), (key_file, certificate.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        self._context.load_cert_chain(cert_file, key_file)
        os.unlink(key_file)  # loaded: the key lives in this process only
        self._sock = socket.create_server((host, 0))
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._ready: queue.Queue[Framed | None] = queue.Queue()
        self._slots = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self._closed = False
        threading.Thread(target=self._accept, name="ddp-channel-tcp", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            self._slots.acquire()  # the rest wait in the listen queue
            try:
                raw, _ = self._sock.accept()
                threading.Thread(
                    target=self._handshake, args=(raw,), name="ddp-channel-auth", daemon=True
                ).start()
            except (OSError, RuntimeError):  # closed, out of descriptors or threads: go on
                self._slots.release()
                if not self._closed:
                    time.sleep(0.05)

    def _handshake(self, raw: socket.socket) -> None:
        """TLS, then the challenge both ways, all before one deadline; any failure (not TLS, a
        wrong key, too slow) closes the connection, and nothing was learned or unpickled."""
        lock = threading.Lock()
        current: list[socket.socket] = [raw]  # the TLS socket once wrapped
        done = [False]  # the handshake passed, or the deadline cut it off

        def cut_off() -> None:
            with lock:
                if not done[0]:
                    done[0] = True
                    with contextlib.suppress(OSError):
                        current[0].shutdown(socket.SHUT_RDWR)  # wakes a blocked read

        deadline = threading.Timer(HANDSHAKE_TIMEOUT_S, cut_off)
        deadline.start()
        try:
            raw.settimeout(HANDSHAKE_TIMEOUT_S)
            try:
                sock = self._context.wrap_socket(raw, server_side=True)  # raw is detached now
            except Exception:
                raw.close()
                return
            with lock:
                current[0] = sock
            conn = Framed(sock)
            try:
                deliver_challenge(conn, self._key)  # type: ignore[arg-type]
                answer_challenge(conn, self._key)  # type: ignore[arg-type]
                with lock:
                    if done[0]:  # the deadline passed meanwhile: the socket is shut
                        raise TimeoutError("handshake past its deadline")
                    done[0] = True
                sock.settimeout(None)
            except Exception:
                conn.close()
                return
            self._ready.put(conn)
        finally:
            deadline.cancel()
            self._slots.release()

    def accept(self) -> Framed:
        """The next authenticated connection; OSError once the listener is closed."""
        conn = self._ready.get()
        if conn is None:
            raise OSError("the channel's listener is closed")
        return conn

    def close(self) -> None:
        """Stop listening. The shutdown wakes the accept loop: on Linux a close alone leaves a
        thread blocked in accept() there, and the port listening, for the life of the process."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._ready.put(None)


def connect(address: str, key: bytes, pin: bytes, timeout: float) -> Framed:
    """A rank's connection to the kernel at ``host:port``: TLS with the kernel's certificate
    checked against ``pin``, then the HMAC challenge both ways."""
    host, _, port = address.rpartition(":")
    raw = socket.create_connection((host, int(port)), timeout=timeout)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False  # no CA and no name: the pinned fingerprint is the check
    context.verify_mode = ssl.CERT_NONE
    sock = context.wrap_socket(raw)
    der = sock.getpeercert(binary_form=True) or b""
    if not hmac.compare_digest(hashlib.sha256(der).digest(), pin):
        sock.close()
        raise AuthenticationError(f"the channel at {address} is not this session's kernel (certificate)")
    conn = Framed(sock)
    answer_challenge(conn, key)  # type: ignore[arg-type]
    deliver_challenge(conn, key)  # type: ignore[arg-type]
    sock.settimeout(None)
    return conn
