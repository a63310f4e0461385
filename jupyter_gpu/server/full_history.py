"""A page load's telemetry reply, encoded and compressed once per sample, never per request.

A workshop's page loads land together, each asking for an hour's history of 8 GPUs. The history is
thinned in blocks of a minute (analysis/history_thinning.py), and each block is encoded and
deflated once and kept: the newest as its samples arrive (its compressor left open), an older one
again only when it is thinned or becomes the first. Each block's deflate stream ends byte-aligned
(a sync flush), so the blocks join into one gzip member whose checksum is combined from theirs: a
new sample costs its own compression (zlib, off the GIL, on a thread), and a request only
deflates its own few fields (``now``, ``owners``) after the shared bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.crc32 import crc32_combine
from ..analysis.history_thinning import block_of, blocks, newest_per_bucket
from .sampler import Sample, Sampler

GZIP_LEVEL = 6
_RAW = -zlib.MAX_WBITS  # raw deflate: the pieces are joined under one gzip header
# A gzip member's header: deflate, no flags, no time, no extra flags, unknown OS (RFC 1952).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_OPEN = '{"history": ['
_WINDOW = 1 << zlib.MAX_WBITS  # how far back deflate looks


def _deflate(data: bytes) -> bytes:
    """``data`` as a raw deflate piece of its own, ending byte-aligned."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


def _deflate_end(data: bytes) -> bytes:
    """``data`` (a request's few hundred bytes) as the stream's last piece: a compressor with a
    small window and little memory takes 4 us to set up where a full one takes 50 us."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -9, 1)
    return compressor.compress(data) + compressor.flush(zlib.Z_FINISH)


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    """The same objects in the same order."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


class _Block:
    """One block of the reply's history: its kept samples' JSON, plain and deflated.

    ``span`` is every sample of the history in the block, ``kept`` those the reply sends (the
    newest of each bucket, when ``thinned``). The first block opens the reply; the others start
    with a comma, and their compressor starts from ``before``: the last 32 KiB of the block before
    (deflate's window: what precedes it in the reply), as pigz does, so that blocks compress as
    well as one stream would (``None`` for the first block; empty for the second, whose block
    before changes every few seconds). A sample whose process lists are those of the kept sample
    before it in the reply leaves them out (the frontend carries them forward: shape.ts
    fillProcesses): ``prior`` is that of the block before's last.
    """

    def __init__(
        self, number: int, span: Sequence[Sample], thinned: bool, before: bytes | None, prior: str | None
    ) -> None:
        self.number = number
        self.span: list[Sample] = []
        self.kept: list[Sample] = []
        self.thinned = thinned
        self.before = before
        self.prior = prior
        self.raw: list[bytes] = []
        self.crc = 0  # CRC-32 and length of the raw pieces
        self.length = 0
        self._deflated: list[bytes] = []
        self._compressor: zlib._Compress | None = (
            zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW, zdict=before)
            if before
            else zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
        )
        self._closed: bytes | None = None
        self._ending: bytes | None = None
        self.add(span)

    def reuse(self, span: Sequence[Sample], thinned: bool, before: bytes | None, prior: str | None) -> bool:
        """Take the block's samples as they are now, if that leaves what it sends as it is, or
        only adds newer samples to its end; False if it has to be encoded anew."""
        if self.thinned != thinned or self.before != before or self.prior != prior:
            return False
        if _same(self.span, span):
            return True
        if thinned:  # older samples have left the history: the same ones kept?
            if _same(self.kept, [span[i] for i in _kept_indices(span)]):
                self.span = list(span)
                return True
            return False
        n = len(self.span)
        if self._compressor is None or n >= len(span) or not _same(self.span, span[:n]):
            return False
        self.add(span[n:])
        return True

    def add(self, span: Sequence[Sample]) -> None:
        """Encode and deflate newer samples of the block (all of them at once when thinned)."""
        assert self._compressor is not None, "a closed block takes no more samples"
        self.span += span
        for i in _kept_indices(span) if self.thinned else range(len(span)):
            sample = span[i]
            repeat = sample.processes_key == (self.kept[-1].processes_key if self.kept else self.prior)
            lead = "," if self.kept or self.before is not None else _OPEN
            piece = f"{lead}{sample.json_lean if repeat else sample.json_history}".encode()
            self.raw.append(piece)
            self.crc = zlib.crc32(piece, self.crc)
            self.length += len(piece)
            self._deflated.append(self._compressor.compress(piece))
            self.kept.append(sample)
        self._ending = None

    def ending(self) -> bytes:
        """The last 32 KiB of the block's JSON (deflate's window), for the block after it."""
        if self._ending is None:
            pieces, size = [], 0
            for piece in reversed(self.raw):
                pieces.append(piece)
                size += len(piece)
                if size >= _WINDOW:
                    break
            self._ending = b"".join(reversed(pieces))[-_WINDOW:]
        return self._ending

    def deflated(self) -> bytes:
        """The deflate stream so far, ending byte-aligned (the compressor stays open)."""
        if self._closed is not None:
            return self._closed
        assert self._compressor is not None
        return b"".join(self._deflated) + self._compressor.copy().flush(zlib.Z_SYNC_FLUSH)

    def close(self) -> None:
        """No more samples: keep the stream, let go of the compressor's memory."""
        if self._compressor is not None:
            self._closed = b"".join(self._deflated) + self._compressor.flush(zlib.Z_SYNC_FLUSH)
            self._compressor = None
            self._deflated = []


def _kept_indices(span: Sequence[Sample]) -> list[int]:
    return newest_per_bucket([s.t for s in span])


class _Times(Sequence[float]):
    """The samples' times, read where asked (bisect asks for a few per block), not copied."""

    def __init__(self, samples: Sequence[Sample]) -> None:
        self._samples = samples

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i: int) -> float:  # type: ignore[override]  # bisect reads single items
        return self._samples[i].t


@dataclass(frozen=True)
class Prefix:
    """A reply up to its own fields, ``{"history": [...], "latest": {...}, ``: deflated (byte-aligned,
    not final), its CRC-32 and length, and plain in pieces (joined only for a client without gzip)."""

    deflated: bytes
    crc: int
    length: int
    raw: tuple[Sequence[bytes], ...]

    def gzip(self, tail: bytes) -> bytes:
        """A gzip member of this prefix and then ``tail``."""
        crc = zlib.crc32(tail, self.crc)
        trailer = struct.pack("<II", crc, (self.length + len(tail)) & 0xFFFFFFFF)
        return b"".join((_GZIP_HEADER, self.deflated, _deflate_end(tail), trailer))

    def plain(self, tail: bytes) -> bytes:
        return b"".join(itertools.chain(*self.raw, (tail,)))


class Encoder:
    """The blocks of the last history encoded, updated with what changed since (one at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: list[_Block] = []
        # the blocks between the first and the newest, and their JSON's CRC-32 and length
        self._middle: tuple[list[_Block], int, int] = ([], 0, 0)

    def prefix(self, samples: Sequence[Sample]) -> Prefix:
        """The reply's prefix for ``samples`` (the sampler's history, oldest first, not empty)."""
        with self._lock:
            self._update(samples)
            crc, length = self._crc()
            latest = f'], "latest": {samples[-1].json_full}, '.encode()
            deflated = [*(block.deflated() for block in self._blocks), _deflate(latest)]
            *older, newest = self._blocks
            return Prefix(
                b"".join(deflated),
                zlib.crc32(latest, crc),
                length + len(latest),
                (*(block.raw for block in older), tuple(newest.raw), (latest,)),
            )

    def _update(self, samples: Sequence[Sample]) -> None:
        old = {block.number: block for block in self._blocks}
        new: list[_Block] = []
        for start, end, thinned in blocks(_Times(samples)):
            number, span = block_of(samples[start].t), samples[start:end]
            # the second block starts afresh: the first changes every few seconds (its oldest
            # samples leave the history), and a block starting from it would be encoded anew
            before = new[-1].ending() if len(new) > 1 else b"" if new else None
            prior = new[-1].kept[-1].processes_key if new else None
            block = old.get(number)
            if block is None or not block.reuse(span, thinned, before, prior):
                block = _Block(number, span, thinned, before, prior)
            new.append(block)
        for block in new[:-1]:
            block.close()  # closed blocks' pieces never change: a Prefix shares them
        self._blocks = new

    def _crc(self) -> tuple[int, int]:
        """The CRC-32 and length of the blocks' JSON: the first's and the newest's combined with
        the middle's, which are read again only when the middle blocks change (once a minute)."""
        first, *middle = self._blocks
        if not middle:
            return first.crc, first.length
        newest = middle.pop()
        if not _same(middle, self._middle[0]):
            crc, length = 0, 0
            for block in middle:
                for piece in block.raw:  # zlib lets go of the GIL for all but small pieces
                    crc = zlib.crc32(piece, crc)
                length += block.length
            self._middle = (middle, crc, length)
        _, middle_crc, middle_length = self._middle
        crc = crc32_combine(crc32_combine(first.crc, middle_crc, middle_length), newest.crc, newest.length)
        return crc, first.length + middle_length + newest.length


def _unchanged(ends: tuple[Sample, Sample, int] | None, key: tuple[Sample, Sample, int] | None) -> bool:
    """The same history: the same oldest and newest sample objects, as many in between."""
    return (
        ends is not None and key is not None and ends[0] is key[0] and ends[1] is key[1] and ends[2] == key[2]
    )


class FullHistory:
    """The prefix of the sampler's current history, shared by every request until the next sample."""

    def __init__(self) -> None:
        self._encoder = Encoder()
        self._key: tuple[Sample, Sample, int] | None = None
        self._prefix: asyncio.Future[Prefix] | None = None

    async def reply(self, sampler: Sampler, fields: str, *, gzip: bool) -> bytes:
        """The reply's body: the sampler's history and latest sample (it has one), then ``fields``
        (the others, as JSON after a comma, closing brace included); gzipped when ``gzip``."""
        if self._prefix is None or not _unchanged(sampler.history_ends(), self._key):
            samples = sampler.since(None)
            self._key = (samples[0], samples[-1], len(samples))
            loop = asyncio.get_running_loop()
            self._prefix = loop.run_in_executor(None, self._encoder.prefix, samples)
        future = self._prefix
        try:
            prefix = await future
        except Exception:
            if self._prefix is future:
                self._prefix = None  # the next request tries again
            raise
        tail = fields.encode()
        if gzip:
            return prefix.gzip(tail)
        return await asyncio.get_running_loop().run_in_executor(None, prefix.plain, tail)
