"""Which of NVML's processes is this kernel, when NVML numbers processes of another PID namespace
(a container sees its own PIDs, NVML the host's).

Pure: the kernel agent hands in, once a second, the NVML processes of the GPU the kernel's
allocator uses and the allocator's reserved bytes. The match, in two steps:

1. **Appeared with the context.** While torch is imported but CUDA not yet initialised, the
   agent keeps the GPU's process list; the kernel's process is among those that appeared when its
   context did (all of them, if none was kept).
2. **Moves with the allocator.** NVML's figure for the kernel's process is its reserved bytes
   plus a context overhead that barely moves. Each time the reserved bytes change by
   ``CHANGE_BYTES`` or more, a candidate whose NVML figure did not change by the same amount
   (within ``TOLERANCE_BYTES`` and 5%) is dropped, as is one holding less than the kernel reserves.

One candidate left, seen move with the allocator (or the only process that appeared) is the
match. Two kernels that created their contexts in the same second are told apart by their first
different allocation; until then, and whenever no candidate fits, the state says so: never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CHANGE_BYTES = 64 * 2**20
TOLERANCE_BYTES = 32 * 2**20
Match = Literal["same_namespace", "matched", "ambiguous", "unmatched"]


@dataclass
class _Candidate:
    used: int  # NVML's figure at the last look
    moved: bool = False  # seen to change with the allocator


@dataclass
class NvmlIdentity:
    """The match so far for one GPU: ``pid`` once ``state`` is ``matched`` or ``same_namespace``."""

    own_pid: int
    state: Match | None = None
    pid: int | None = None
    _before: set[int] | None = None
    _candidates: dict[int, _Candidate] | None = None
    _sole_newcomer: bool = False
    _reserved: int = 0

    def before_context(self, pids: set[int]) -> None:
        """The GPU's processes while this kernel has no context yet."""
        if self._candidates is None:
            self._before = set(pids)

    def observe(self, processes: dict[int, int], reserved: int) -> None:
        """NVML's processes on the kernel's GPU (pid → used bytes) and the allocator's reserved
        bytes there, now."""
        if self.state == "same_namespace":
            return
        if self.own_pid in processes:
            self.state, self.pid = "same_namespace", self.own_pid
            return
        if self._candidates is None:
            newcomers = set(processes) - (self._before or set())
            self._sole_newcomer = self._before is not None and len(newcomers) == 1
            self._candidates = {pid: _Candidate(processes[pid]) for pid in newcomers}
            self._reserved = reserved
        else:
            change = reserved - self._reserved
            kept: dict[int, _Candidate] = {}
            for pid, candidate in self._candidates.items():
                if pid not in processes:
                    continue  # gone: not this live kernel
                moved = processes[pid] - candidate.used
                if abs(change) >= CHANGE_BYTES:
                    if abs(moved - change) > TOLERANCE_BYTES + 0.05 * abs(change):
                        continue
                    candidate.moved = True
                candidate.used = processes[pid]
                kept[pid] = candidate
            self._candidates = kept
            if abs(change) >= CHANGE_BYTES:
                self._reserved = reserved
        self._candidates = {p: c for p, c in self._candidates.items() if c.used >= reserved}
        self._decide()

    def _decide(self) -> None:
        candidates = self._candidates or {}
        if not candidates:
            self.state, self.pid = "unmatched", None
        elif len(candidates) == 1:
            ((pid, candidate),) = candidates.items()
            sure = candidate.moved or self._sole_newcomer
            self.state, self.pid = ("matched", pid) if sure else ("ambiguous", None)
        else:
            self.state, self.pid = "ambiguous", None

    @property
    def reason(self) -> str | None:
        """Why there is no match yet, for people."""
        count = len(self._candidates or {})
        if self.state == "ambiguous":
            return (
                f"{count} of NVML's processes could be this kernel; it tells them apart once its "
                f"PyTorch allocator reserves or frees {CHANGE_BYTES >> 20} MiB or more"
            )
        if self.state == "unmatched":
            return "no NVML process on this GPU moves with this kernel's PyTorch allocator"
        return None
