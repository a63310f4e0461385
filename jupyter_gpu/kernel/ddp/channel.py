"""Signed messages between the kernel and its ranks, over a c10d store that anyone may reach.

torch's ``TCPStore`` has no authentication: every local user (and, across nodes, the network)
can read, write and delete its keys. So nothing read from it is trusted: each value carries an
HMAC-SHA256 over the session id, the key it is stored under and the payload, made with a
per-session secret that is handed to the ranks through the process launcher (the forkserver's
pipe, never the network). The tag is checked with ``hmac.compare_digest`` *before* anything is
unpickled; a value that fails is dropped and reported once, never executed. Binding the key
name stops a signed message from being replayed under another key (``cmd/7`` copied to ``cmd/8``).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import sys
import time
from typing import Any

TAG_BYTES = hashlib.sha256().digest_size
SECRET_ENV = "JUPYTER_GPU_DDP_SECRET"  # multi-node: the same value on every node, set by the user
# An abort signed before the gang started (by more than the nodes' clock skew) is a replay of
# an earlier run's. Within this window a replay is still accepted: it can only stop a run.
ABORT_CLOCK_SKEW_S = 2.0
MIN_SECRET_CHARS = 32  # 128 bits as hex: a signed message read off the network must not let
# anyone guess the secret offline


def new_secret() -> bytes:
    """A fresh key for one single-node gang."""
    return secrets.token_bytes(32)


def shared_secret() -> bytes | None:
    """The multi-node key the user gave every node (``JUPYTER_GPU_DDP_SECRET``), or None when
    it is missing or too short to be random enough."""
    text = os.environ.get(SECRET_ENV, "").strip()
    return hashlib.sha256(text.encode()).digest() if len(text) >= MIN_SECRET_CHARS else None


class Channel:
    """``put``/``take`` of pickled objects under store keys, signed with one session's secret."""

    def __init__(self, store: Any, secret: bytes, session: str, who: str) -> None:
        self.store = store
        self._secret = secret
        self._session = session.encode()
        self._who = who  # "kernel" or "rank N": named in the warning about a forged message
        self.dropped = 0

    def _tag(self, key: str, payload: bytes) -> bytes:
        mac = hmac.new(self._secret, self._session, hashlib.sha256)
        mac.update(b"\0" + key.encode() + b"\0")
        mac.update(payload)
        return mac.digest()

    def seal(self, key: str, payload: bytes) -> bytes:
        return self._tag(key, payload) + payload

    def open(self, key: str, blob: bytes) -> bytes | None:
        """The payload if ``blob`` was sealed under ``key`` with this secret, else None (reported)."""
        tag, payload = blob[:TAG_BYTES], blob[TAG_BYTES:]
        if len(tag) == TAG_BYTES and hmac.compare_digest(tag, self._tag(key, payload)):
            return payload
        self._report(key)
        return None

    def put(self, key: str, obj: Any) -> None:
        self.store.set(key, self.seal(key, pickle.dumps(obj)))

    def take(self, key: str) -> Any | None:
        """The object under ``key`` if it is present and genuine; None otherwise."""
        try:
            if not self.store.check([key]):
                return None
            blob = self.store.get(key)
        except RuntimeError:  # DistStoreError: deleted between check and get, by a stranger
            return None
        payload = self.open(key, blob)
        return None if payload is None else pickle.loads(payload)

    def sign_abort(self, key: str) -> bytes:
        return self.seal(key, repr(time.time()).encode())

    def abort_is_genuine(self, key: str, blob: bytes, since: float) -> bool:
        """An abort signed with the shared secret and set after this gang started."""
        payload = self.open(key, blob)
        try:
            return payload is not None and float(payload) >= since - ABORT_CLOCK_SKEW_S
        except ValueError:
            return False

    def _report(self, key: str) -> None:
        self.dropped += 1
        if self.dropped == 1:  # once per session: a flood must not flood the cell's output
            print(
                f"jupyter_gpu ({self._who}): dropped a message under {key!r} that this session "
                "did not sign (another user on this machine or network writing to the "
                "torch.distributed store?); it was not run",
                file=sys.stderr,
                flush=True,
            )
