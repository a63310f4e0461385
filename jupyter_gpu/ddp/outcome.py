"""What came back of one command to the ranks, and how a rank that did not answer ended."""

from __future__ import annotations

from dataclasses import dataclass, field

from .protocol import Reply


@dataclass
class Death:
    """A rank process that ended without reporting back (signal, exit, crash)."""

    rank: int
    pid: int
    exitcode: int
    signal_name: str | None
    message: str  # the traceback in elastic's error file: the rank raised before it ended
    stderr_tail: list[str]
    node: str = ""  # --slurm: the host it ran on (its pid is that host's, not this one's)

    @property
    def ending(self) -> str:
        """How the process ended: 'exited with code 1', 'was killed by SIGKILL (out of memory?)'."""
        if self.signal_name:
            hint = " (out of memory?)" if self.signal_name == "SIGKILL" else ""
            return f"was killed by {self.signal_name}{hint}"
        return f"exited with code {self.exitcode}"

    @property
    def exception(self) -> str | None:
        """The last line of the traceback it raised ('RuntimeError: script failed'), if any."""
        lines = [line for line in self.message.splitlines() if line.strip()]
        return lines[-1].strip() if lines else None

    @property
    def who(self) -> str:
        """'rank 1 (pid 4242)', or 'rank 3 (on n2)' for a rank on another host."""
        return f"rank {self.rank} ({f'on {self.node}' if self.node else f'pid {self.pid}'})"

    def describe(self) -> str:
        return f"{self.who} {self.ending}"


@dataclass
class Collected:
    """What came back for one command, and why collecting stopped."""

    replies: dict[int, Reply] = field(default_factory=dict)
    death: Death | None = None
    aborted: bool = False  # another node's kernel gave up on the run
    expired: bool = False  # the deadline passed first
    lost: list[int] = field(default_factory=list)  # alive, but their channel closed

    def failures(self) -> list[Reply]:
        return [r for r in self.replies.values() if not r.ok]
