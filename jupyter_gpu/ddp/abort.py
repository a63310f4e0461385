"""The one message that crosses nodes: a signed "stop" from the kernel whose ranks failed.

Everything else between a kernel and its ranks stays on the node (``channel.py``). Across nodes
the only place both sides reach is torch's rendezvous store, which has no authentication: so an
abort is a timestamp carrying an HMAC-SHA256 made with the secret the user gave every node
(``JUPYTER_GPU_DDP_SECRET``). A forged abort is dropped; a replayed one is older than the run.
The abort says nothing about the session (its key is fixed, its payload a time).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time

SECRET_ENV = "JUPYTER_GPU_DDP_SECRET"  # multi-node: the same value on every node, set by the user
ABORT_KEY = "jupyter_gpu/ddp/abort"
TAG_BYTES = hashlib.sha256().digest_size
# An abort signed before the gang started (by more than the nodes' clock skew) is a replay of
# an earlier run's. Within this window a replay is still accepted: it can only stop a run.
ABORT_CLOCK_SKEW_S = 2.0
MIN_SECRET_CHARS = 32  # 128 bits as hex: a signed abort read off the network must not let
# anyone guess the secret offline


def shared_secret() -> bytes | None:
    """The multi-node key the user gave every node (``JUPYTER_GPU_DDP_SECRET``), or None when
    it is missing or too short to be random enough."""
    text = os.environ.get(SECRET_ENV, "").strip()
    return hashlib.sha256(text.encode()).digest() if len(text) >= MIN_SECRET_CHARS else None


def _tag(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, b"abort\0" + payload, hashlib.sha256).digest()


def sign_abort(secret: bytes) -> bytes:
    payload = repr(time.time()).encode()
    return _tag(secret, payload) + payload


def abort_is_genuine(secret: bytes, blob: bytes, since: float) -> bool:
    """An abort signed with the shared secret and set after ``since`` (the gang's start)."""
    tag, payload = blob[:TAG_BYTES], blob[TAG_BYTES:]
    if len(tag) != TAG_BYTES or not hmac.compare_digest(tag, _tag(secret, payload)):
        return False
    try:
        return float(payload) >= since - ABORT_CLOCK_SKEW_S
    except ValueError:
        return False
