"""Live output of the ranks into the notebook cell that started them.

Ranks write to per-rank log files (elastic's fd redirection, so C/C++ output is caught too); a
thread tails them and writes into the kernel's stdout/stderr. ipykernel attributes a write to the
parent header of the *writing thread* when one was set (``OutStream.set_thread_parent``), and
otherwise to whatever cell ran last; so the header is captured on the main thread when the cell
starts and set around every write. Output that arrives after the cell ends (a rank's
background thread, a persistent session between cells) still lands in that cell.
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, TextIO

_POLL_INTERVAL = 0.05  # seconds between looks at the log files: 'live' without busy-waiting


class CellStreams:
    """The kernel's stdout/stderr as they are for the current cell, to be written from any thread."""

    def __init__(self) -> None:
        self.streams: dict[str, TextIO] = {"stdout": sys.stdout, "stderr": sys.stderr}
        self.header: Any = getattr(sys.stdout, "parent_header", None)

    def write(self, name: str, text: str) -> None:
        """Write ``text`` as output of the captured cell, whichever thread calls and cell runs now."""
        stream = self.streams[name]
        setter = getattr(stream, "set_thread_parent", None)
        if setter is None or self.header is None:
            stream.write(text)
            return
        token = setter(self.header)
        try:
            stream.write(text)
        finally:
            getattr(stream, "reset_thread_parent")(token)  # noqa: B009 - ipykernel's OutStream only

    def flush(self) -> None:
        for stream in self.streams.values():
            stream.flush()


@dataclass
class _Log:
    rank: int
    name: str  # stdout | stderr
    path: str
    tag: str  # what marks its lines when several ranks are shown: "[rank 3] ", "[n2 rank 3] "
    handle: Any = None
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    at_line_start: bool = True

    def read(self) -> str:
        if self.handle is None:
            if not os.path.exists(self.path):
                return ""
            self.handle = open(self.path, "rb")  # noqa: SIM115 - kept open while tailing
        return self.decoder.decode(self.handle.read())

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


class LogPump:
    """Tails the ranks' log files and copies new text to the current target cell."""

    def __init__(self, logs: dict[int, tuple[str, str]], hosts: dict[int, str] | None = None) -> None:
        """``logs``: global rank -> (stdout path, stderr path); ``hosts``: rank -> its node,
        which then marks its lines too (ranks on several nodes)."""
        hosts = hosts or {}
        self._logs = [
            _Log(rank, name, path, f"[{hosts[rank]} rank {rank}] " if rank in hosts else f"[rank {rank}] ")
            for rank, paths in sorted(logs.items())
            for name, path in zip(("stdout", "stderr"), paths)
        ]
        self._lock = threading.Lock()
        self._target: CellStreams | None = None
        self._shown: tuple[int, ...] | None = (0,)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddp-output", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def set_target(self, target: CellStreams, shown: tuple[int, ...] | None) -> None:
        """Send output from now on to ``target``; ``shown`` ranks only (None = all, prefixed)."""
        with self._lock:
            self._copy(self._target)
            self._target, self._shown = target, shown

    def drain(self) -> None:
        """Copy everything the ranks have written so far (call after they reported back)."""
        with self._lock:
            if self._stop.is_set():
                return  # stopped: the last drain has happened
            self._copy(self._target)
        if self._target is not None:
            self._target.flush()

    def stop(self) -> None:
        """Stop tailing after copying what is left; safe to call more than once."""
        if self._stop.is_set():
            return
        self.drain()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for log in self._logs:
            log.close()

    def _run(self) -> None:
        while not self._stop.wait(_POLL_INTERVAL):
            with self._lock:
                self._copy(self._target)

    def _copy(self, target: CellStreams | None) -> None:
        if target is None:
            return  # nothing is read before the first cell takes the output
        shown = self._shown
        prefix = shown is None or len(shown) > 1
        for log in self._logs:
            text = log.read()
            if not text or (shown is not None and log.rank not in shown):
                continue
            if prefix:
                text = self._prefixed(log, text)
            target.write(log.name, text)

    @staticmethod
    def _prefixed(log: _Log, text: str) -> str:
        tag = log.tag
        lines = text.splitlines(keepends=True)
        out = []
        for line in lines:
            out.append(tag + line if log.at_line_start else line)
            log.at_line_start = line.endswith(("\n", "\r"))  # \r: a progress bar redraws the line
        return "".join(out)


def tail(path: str, lines: int = 15) -> list[str]:
    """Last ``lines`` lines of a rank's log (for 'killed by SIGKILL' reports)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]
