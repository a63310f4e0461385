/**
 * Shaping of one kernel's per-cell timeline (`GET api/gpu/kernels/<id>/cells`)
 * into what the timeline view draws. Pure functions, no DOM: unit-tested in
 * src/__tests__/timeline.test.ts.
 */
import type { Cell, CellsReply, RankedCell } from './types';

/** uPlot's columnar data: times (unix seconds), then one column per GPU. */
export interface ITimelineData {
  gpus: number[];
  columns: [number[], ...(number | null)[][]];
  /** Each cell's start that used CUDA, with its label, for the markers. */
  boundaries: { t: number; label: string }[];
}

/** `[7]` as the notebook shows it, `[?]` for a cell run without a number. */
export function cellLabel(cell: Cell): string {
  return cell.execution_count === null ? '[?]' : `[${cell.execution_count}]`;
}

/**
 * Allocated memory over time, per GPU: a point as each cell started (what was
 * allocated then) and one as it ended. Cells run without CUDA are left out.
 */
export function timelineData(cells: Cell[]): ITimelineData {
  const indices = new Set<number>();
  cells.forEach(c => c.gpus.forEach(g => indices.add(g.index)));
  const gpus = Array.from(indices).sort((a, b) => a - b);
  const times: number[] = [];
  const series: (number | null)[][] = gpus.map(() => []);
  const boundaries: { t: number; label: string }[] = [];
  const ordered = cells
    .filter(c => c.gpus.length > 0)
    .sort((a, b) => a.start - b.start);
  for (const cell of ordered) {
    boundaries.push({ t: cell.start, label: cellLabel(cell) });
    for (const [t, atEnd] of [
      [cell.start, false],
      [Math.max(cell.end, cell.start), true]
    ] as [number, boolean][]) {
      times.push(t);
      gpus.forEach((index, i) => {
        const g = cell.gpus.find(x => x.index === index);
        series[i].push(
          g === undefined
            ? null
            : atEnd
              ? g.allocated_bytes
              : g.allocated_bytes - g.allocated_change_bytes
        );
      });
    }
  }
  return { gpus, columns: [times, ...series], boundaries };
}

/** The cells a ranking names, with their figure, in the ranking's order. */
export function rankedCells(
  reply: CellsReply,
  ranking: RankedCell[]
): { cell: Cell; bytes: number }[] {
  const out: { cell: Cell; bytes: number }[] = [];
  for (const r of ranking) {
    const cell = reply.cells.find(c => c.pid === r.pid && c.seq === r.seq);
    if (cell) {
      out.push({ cell, bytes: r.bytes });
    }
  }
  return out;
}

/** The highest exact peak of a cell over its GPUs, or null when none is exact. */
export function cellPeak(cell: Cell): number | null {
  const peaks = cell.gpus
    .map(g => g.peak_allocated_bytes)
    .filter((p): p is number => p !== null);
  return peaks.length ? Math.max(...peaks) : null;
}
