/**
 * Shaping of one kernel's per-cell timeline (`GET api/gpu/kernels/<id>/cells`)
 * into what the timeline view draws. Pure functions, no DOM: unit-tested in
 * src/__tests__/timeline.test.ts.
 */
import type { IChartMarker } from './series';
import type { Cell, CellsReply, RankedCell } from './types';

/** uPlot's columnar data: times (unix seconds), then one column per GPU. */
export interface ITimelineData {
  gpus: number[];
  columns: [number[], ...(number | null)[][]];
  /** Each cell's start that used CUDA, for the markers. */
  boundaries: IChartMarker[];
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
  const boundaries: IChartMarker[] = [];
  const ordered = cells
    .filter(c => c.gpus.length > 0)
    .sort((a, b) => a.start - b.start);
  for (const cell of ordered) {
    const label = cellLabel(cell);
    boundaries.push({ t: cell.start, label, title: `cell ${label}` });
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

/** One notebook's cells, as the dashboard marks them on a GPU's memory chart. */
export interface INotebookCells {
  /** As the chart's legend names the notebook. */
  path: string;
  /** Its layer's colour in the chart. */
  colour: string;
  cells: Cell[];
}

/**
 * The starts of the notebooks' cells that fall in the chart's time range,
 * oldest first; the hover names the notebook and the cell. A kernel keeps up
 * to 1,000 cells: only those in view are drawn.
 */
export function cellMarkers(
  notebooks: INotebookCells[],
  range: [number, number]
): IChartMarker[] {
  const [t0, t1] = range;
  const markers: IChartMarker[] = [];
  for (const { path, colour, cells } of notebooks) {
    for (const cell of cells) {
      if (cell.start >= t0 && cell.start <= t1) {
        const label = cellLabel(cell);
        markers.push({
          t: cell.start,
          label,
          title: `${path} ${label}`,
          colour
        });
      }
    }
  }
  return markers.sort((a, b) => a.t - b.t);
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
