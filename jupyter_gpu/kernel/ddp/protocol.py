"""What the kernel and the ranks say to each other over the c10d ``TCPStore``.

The store is the one the ranks bootstrap their process group from (``MASTER_ADDR:MASTER_PORT``),
so there is no extra server or socket protocol: the kernel ``set``s ``cmd/<seq>``; every rank
``wait``s for it, runs it, ``set``s ``reply/<seq>/<rank>`` and rings ``replies/<seq>`` (``add``),
so the kernel looks for replies as soon as the *first* one, typically a failure, arrives.
Every value is signed (``channel.Channel``): the store itself is open to anyone who reaches it,
so the doorbell is only a hint and a reply counts only when its signature holds. Envelopes are
pickles of these dataclasses; notebook objects inside them are cloudpickled separately so one
bad object can be named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import RemoteError

CommandKind = Literal["init", "cell", "push", "pull", "save", "load", "stop"]

# Session keys live under this prefix of the rendezvous store, then the session id.
KEY_PREFIX = "jupyter_gpu/ddp"
ABORT_KEY = "abort"  # set by any node's kernel when its ranks fail: other nodes stop theirs
# Store requests of the kernel and the ranks (not their waits for the next command): a key a
# stranger deleted between check and get costs this long, not a minute.
STORE_TIMEOUT_S = 5.0


def cmd_key(seq: int) -> str:
    return f"cmd/{seq}"


def reply_key(seq: int, rank: int) -> str:
    return f"reply/{seq}/{rank}"


def count_key(seq: int) -> str:
    return f"replies/{seq}"


@dataclass
class WorkerConfig:
    """Passed to every rank's entry point at start (pickled by the process launcher)."""

    session: str
    secret: bytes  # signs every message of this session; travels only through the launcher
    kernel_pid: int
    backend: str
    amp: str | None
    sys_path: list[str]
    cwd: str
    device: str = "auto"  # "cpu": the ranks run on the CPU even where GPUs are visible
    fsdp: bool = False  # bind a device mesh and shard() (kernel/ddp/fsdp.py) in the namespace


@dataclass
class Command:
    kind: CommandKind
    source: str = ""
    line_offset: int = 0
    objects: dict[str, bytes] = field(default_factory=dict)  # name -> cloudpickle
    return_name: str | None = None
    names: tuple[str, ...] = ()  # pull: the names; save/load: (model, optimizer or "")
    path: str = ""  # save: the folder to write (a fresh one); load: the checkpoint
    replaces: str = ""  # save: the older checkpoint it replaces, which must be of the same model


@dataclass
class Reply:
    rank: int
    ok: bool
    value: bytes | None = None  # cloudpickle of the returned / pulled value
    error: RemoteError | None = None
    interrupted: bool = False
    sent: float = 0.0  # time.monotonic() on the rank: replies found together are taken in this order
    info: dict[str, Any] = field(default_factory=dict)
