"""Draw an allocator snapshot as an SVG segment map: one strip per pool, blocks by state.

Segments are laid end to end in address order and wrapped into rows, with a gap between
segments, so that a stranded hole is seen inside the segment that traps it. Each pool has its
own scale (a 2 MiB small-pool segment would vanish beside gigabytes of large segments).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.fragmentation import ALLOCATED, INACTIVE, PENDING_FREE, POOLS, free_block_parts
from ..analysis.units import format_bytes

# kind -> (colour, legend text)
KINDS: Mapping[str, tuple[str, str]] = {
    "allocated": ("#3465a4", "allocated (requested)"),
    "rounding": ("#9db9e0", "rounding waste"),
    "pending": ("#e9a23b", "freed, awaiting stream"),
    "stranded": ("#cc3b3b", "free, stranded (fragmentation)"),
    "releasable": ("#c8ccd2", "free, empty_cache() returns it"),
    "private": ("#8e7cc3", "free, in a CUDA graph pool"),
}
WIDTH = 760
ROW = 12
ROW_GAP = 3
MAX_ROWS = {"large": 12, "small": 3}
# Do not stretch a nearly empty pool over many rows: at least this many bytes per pixel.
MIN_BYTES_PER_PX = {"large": 256 * 1024, "small": 16 * 1024}
MAX_RECTS = 20_000


def _pieces(segment: Mapping[str, Any]) -> Iterable[tuple[str, int, str]]:
    """(kind, bytes, tooltip) for the blocks of one segment, in address order."""
    blocks = sorted(segment["blocks"], key=lambda b: b["address"])
    private = tuple(segment.get("segment_pool_id") or (0, 0)) != (0, 0)
    for block in blocks:
        size, state = block["size"], block["state"]
        where = f"{format_bytes(size)} block at {block['address']:#x}"
        if state == ALLOCATED:
            requested = min(size, block.get("requested_size", size))
            yield "allocated", requested, f"{where}: allocated, {format_bytes(requested)} requested"
            yield "rounding", size - requested, f"{where}: {format_bytes(size - requested)} rounding waste"
        elif state in PENDING_FREE:
            yield "pending", size, f"{where}: freed, waiting for other streams"
        elif state == INACTIVE:
            free_kind = "private" if private else "releasable"
            if segment.get("is_expandable"):
                before, whole, after = free_block_parts(segment, block)
                yield "stranded", before, f"{where}: free sliver, not a whole page"
                yield free_kind, whole, f"{where}: {format_bytes(whole)} of whole free pages"
                yield "stranded", after, f"{where}: free sliver, not a whole page"
            elif len(blocks) > 1:
                yield "stranded", size, f"{where}: free, stranded in a segment with live blocks"
            else:
                yield free_kind, size, f"{where}: free, the whole segment"


@dataclass
class _Strip:
    """Linear pixel cursor wrapped into rows; merges sub-pixel runs of one kind."""

    top: float
    bytes_per_px: float
    rects: list[str]
    cursor: float = 0.0
    run: tuple[str, float, float, str] | None = None  # kind, start, width, tooltip
    truncated: bool = False

    def add(self, kind: str, nbytes: int, tooltip: str) -> None:
        if nbytes <= 0:
            return
        width = nbytes / self.bytes_per_px
        if self.run and self.run[0] == kind and self.run[2] < 1 and width < 1:
            k, start, w, _ = self.run
            self.run = (k, start, w + width, f"several small blocks: {KINDS[kind][1]}")
        else:
            self.flush()
            self.run = (kind, self.cursor, width, tooltip)
        self.cursor += width

    def gap(self, px: float) -> None:
        self.flush()
        self.cursor += px

    def flush(self) -> None:
        if self.run is None:
            return
        kind, start, width, tooltip = self.run
        self.run = None
        while width > 1e-9:
            if len(self.rects) >= MAX_RECTS:
                self.truncated = True
                return
            row, x = divmod(start, WIDTH)
            w = min(width, WIDTH - x)
            y = self.top + row * (ROW + ROW_GAP)
            self.rects.append(
                f'<rect x="{x:.2f}" y="{y:.0f}" width="{max(w, 0.5):.2f}" height="{ROW}" '
                f'fill="{KINDS[kind][0]}"><title>{html.escape(tooltip)}</title></rect>'
            )
            start += w
            width -= w

    @property
    def rows(self) -> int:
        return max(1, int(-(-self.cursor // WIDTH)))


def segment_map_svg(segments: Sequence[Mapping[str, Any]]) -> str:
    """SVG of the given segments (one device's); an empty map says so."""
    rects: list[str] = []
    texts: list[str] = []
    totals = dict.fromkeys(KINDS, 0)
    top = 4.0
    truncated = False
    for pool in POOLS:
        pool_segments = sorted(
            (s for s in segments if s.get("segment_type", "large") == pool), key=lambda s: s["address"]
        )
        if not pool_segments:
            continue
        total = sum(s["total_size"] for s in pool_segments)
        texts.append(
            f'<text x="0" y="{top + 10:.0f}">{pool} pool: {len(pool_segments)} segment'
            f"{'s' if len(pool_segments) != 1 else ''}, "
            f"{html.escape(format_bytes(total))}</text>"
        )
        top += 16
        gap = 2 if len(pool_segments) * 2 <= WIDTH * MAX_ROWS[pool] // 4 else 0
        capacity = WIDTH * MAX_ROWS[pool] - gap * len(pool_segments)
        strip = _Strip(top, max(total / capacity, MIN_BYTES_PER_PX[pool]), rects)
        for segment in pool_segments:
            for kind, nbytes, tooltip in _pieces(segment):
                totals[kind] += nbytes
                strip.add(kind, nbytes, tooltip)
            strip.gap(gap)
        strip.flush()
        truncated = truncated or strip.truncated
        top += strip.rows * (ROW + ROW_GAP) + 8
    if not texts:
        texts.append(f'<text x="0" y="{top + 10:.0f}">no segments: nothing is cached on this device</text>')
        top += 20
    legend_x = 0.0
    for kind, (colour, label) in KINDS.items():
        if not totals[kind]:
            continue
        text = f"{label} {format_bytes(totals[kind])}"
        texts.append(
            f'<rect x="{legend_x:.0f}" y="{top:.0f}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{legend_x + 14:.0f}" y="{top + 9:.0f}">{html.escape(text)}</text>'
        )
        legend_x += 14 + 6.2 * len(text) + 14
        if legend_x > WIDTH - 150:
            legend_x = 0.0
            top += 16
    if truncated:
        top += 16
        texts.append(f'<text x="0" y="{top + 9:.0f}">(map truncated at {MAX_RECTS} rectangles)</text>')
    height = top + 16
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="sans-serif" font-size="11" role="img" '
        'aria-label="PyTorch allocator segment map">' + "".join(texts) + "".join(rects) + "</svg>"
    )
