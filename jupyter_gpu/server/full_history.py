"""The history part of a full telemetry reply (a page load's), built once per sample, not per request.

A workshop's page loads land together: fifty replies of an hour's history for 8 GPUs each joined and
gzipped their own megabytes and held ``/api/status`` back. The history only changes when the sampler
records a sample, so it is thinned (analysis/history_thinning.py), joined and compressed once and
shared by every request until then. The reply puts ``history`` first: a request then only appends
its own fields (``now``, ``owners``, ``latest``) to a copy of the shared compressor's state.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.history_thinning import repeats, thin
from .sampler import Sample

GZIP_LEVEL = 5
GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip member, as Content-Encoding: gzip reads it


@dataclass(frozen=True)
class _Prefix:
    """``{"history": [...], `` as bytes, plain and gzipped (the compressor left open after it)."""

    raw: bytes
    gzipped: bytes
    compressor: zlib._Compress


def history_json(samples: Sequence[Sample]) -> str:
    """The thinned history, oldest first; a sample whose process lists repeat the kept sample
    before it leaves them out (the frontend carries them forward: shape.ts fillProcesses)."""
    kept = [samples[i] for i in thin([s.t for s in samples])]
    same = repeats([s.processes_key for s in kept])
    return ",".join(s.json_lean if rep else s.json_history for s, rep in zip(kept, same))


def _prefix(samples: Sequence[Sample]) -> _Prefix:
    raw = f'{{"history": [{history_json(samples)}], '.encode()
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    return _Prefix(raw, compressor.compress(raw), compressor)


def _same(key: tuple[Sample, Sample, int], cached: tuple[Sample, Sample, int] | None) -> bool:
    """The same history: the same oldest and newest sample objects, as many in between."""
    return cached is not None and key[0] is cached[0] and key[1] is cached[1] and key[2] == cached[2]


class FullHistory:
    """The last full-history prefix, for the sampler's current history."""

    def __init__(self) -> None:
        self._key: tuple[Sample, Sample, int] | None = None
        self._prefix: asyncio.Future[_Prefix] | None = None

    async def reply(self, samples: Sequence[Sample], rest: str, *, gzip: bool) -> bytes:
        """The reply's body: the shared history, then ``rest`` (the other fields, after a ``{``'s
        place, closing brace included); gzipped when ``gzip``."""
        key = (samples[0], samples[-1], len(samples))
        if self._prefix is None or not _same(key, self._key):
            # joined and compressed on a thread: zlib lets go of the GIL while it works
            self._key = key
            self._prefix = asyncio.get_running_loop().run_in_executor(None, _prefix, list(samples))
        future = self._prefix
        try:
            prefix = await future
        except Exception:
            if self._prefix is future:
                self._prefix = None  # the next request tries again
            raise
        tail = rest.encode()
        if not gzip:
            return prefix.raw + tail
        compressor = prefix.compressor.copy()
        return prefix.gzipped + compressor.compress(tail) + compressor.flush()
