"""The watcher of the shared-machine tests, run as another uid (``other_user.run_as_attacker``).

It does what a curious neighbour on a workshop machine can do without any secret, in a loop
until ``STOP`` (argv[1]) exists or 60 s pass (after three rounds it creates ``WATCHED``,
argv[2], so that a cell can hold its values until they have been watched): connect to every TCP listener on loopback as a
torch ``TCPStore`` client, list every key and read it; connect to every Unix socket that
``/proc/net/unix`` shows and read what it sends; open 200 connections to each (a flood); read
every file it may under the temporary directories. It prints one JSON object: what it read
(hex), and what it could and could not reach.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading
import time
from datetime import timedelta

STOP, WATCHED, TARGETS = sys.argv[1:4]
ROOTS = sys.argv[4:]
# TARGETS: a file of port numbers, the victim's listeners. An attacker finds them by probing
# every port that appears when the victim starts its ranks; the file only saves the test the
# seconds that probing every other server's ports on this machine takes.  # folders whose files are read (the temporary directories)
found: dict[str, str] = {}
reached: dict[str, str] = {}


def tcp_listeners() -> set[int]:
    try:
        targets = {int(p) for p in open(TARGETS).read().split()}
    except (OSError, ValueError):
        targets = set()
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports & targets


def unix_paths() -> set[str]:
    paths = set()
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith("/"):
            paths.add(fields[7])
    return paths


def read_store(port: int) -> None:
    """Read every key of the store at ``port``; give up on a port that hangs the client."""
    if reached.get(f"tcp:{port}", "").startswith("no store"):
        return  # not a store (a kernel's ZeroMQ port, gloo's): asked once
    attempt = threading.Thread(target=_read_store, args=(port,), daemon=True)
    attempt.start()
    attempt.join(5)
    if attempt.is_alive():
        reached[f"tcp:{port}"] = "no store: the client hung"


def _read_store(port: int) -> None:
    import torch.distributed as dist

    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=1))
        keys = store.list_keys()
    except Exception as exc:
        reached.setdefault(f"tcp:{port}", f"no store: {type(exc).__name__}")
        return
    reached[f"tcp:{port}"] = f"store with {len(keys)} keys"
    for key in keys:
        try:
            found[f"tcp:{port}:{key}"] = (key.encode() + b"=" + store.get(key)).hex()
        except Exception:
            continue


def read_unix(path: str) -> None:
    held = []
    ours = any(path.startswith(root) for root in ROOTS)  # the machine's own services: one try
    try:
        for _ in range(200 if ours else 1):  # a flood: each held connection costs a descriptor
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(0.5)
            s.connect(path)
            held.append(s)
        reached[f"unix:{path}"] = "connected"
        data = held[0].recv(65536)
        found[f"unix:{path}"] = data.hex()
    except OSError as exc:
        reached.setdefault(f"unix:{path}", f"refused: {type(exc).__name__}")
    finally:
        for s in held:
            s.close()


def read_files() -> None:
    for root in ROOTS:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(("pip-", "jgpu-attacker-"))]
            for name in files:
                path = os.path.join(folder, name)
                try:
                    if not stat.S_ISREG(os.lstat(path).st_mode):
                        continue  # a FIFO would block the reader, a socket cannot be read
                    with open(path, "rb") as handle:
                        found[f"file:{path}"] = (path.encode() + b"=" + handle.read(1 << 16)).hex()
                except OSError:
                    continue


deadline = time.monotonic() + 60
rounds = 0
while not os.path.exists(STOP) and time.monotonic() < deadline:
    rounds += 1
    for port in tcp_listeners():
        if time.monotonic() < deadline:
            read_store(port)
    for path in unix_paths():
        read_unix(path)
    read_files()
    if rounds == 3:
        open(WATCHED, "w").close()
print(json.dumps({"uid": os.getuid(), "rounds": rounds, "found": found, "reached": reached}))
