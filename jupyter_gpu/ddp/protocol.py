"""What the kernel and its ranks say to each other over their private channel (``channel.py``).

The kernel sends ``(seq, Command)`` to every local rank; each rank runs it and answers
``(seq, Reply)``. Envelopes are pickles of these dataclasses; notebook objects inside them are
cloudpickled separately so one bad object can be named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import RemoteError
from .options import WorkerOptions

CommandKind = Literal["init", "cell", "push", "pull", "save", "load", "stop"]


@dataclass
class WorkerConfig:
    """Passed to every rank's entry point at start (pickled by the process launcher)."""

    channel: str  # the kernel's Unix socket, in the session's 0700 directory; --slurm: host:port
    key: bytes  # answers the channel's challenge; travels only through the process launcher
    store: str | None  # one node: the process group's FileStore, beside the socket; else env://
    kernel_pid: int
    sys_path: list[str]
    cwd: str
    options: WorkerOptions  # the launch's options, whole: a new option needs no copying here
    pin: bytes | None = None  # --slurm: SHA-256 of the channel's TLS certificate, which ranks check


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
