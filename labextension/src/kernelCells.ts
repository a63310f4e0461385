/**
 * The per-cell timelines of the kernels whose memory the dashboard's charts
 * show, for their cell markers. The requests stay bounded: a kernel's cells
 * are asked for at most once every few telemetry polls, only while the
 * dashboard is on screen (it calls `poll()` then), and only for kernels a
 * chart asked about since the last poll; the others are forgotten. A kernel
 * the server no longer has is not asked for again.
 */
import type { Cell, CellsReply } from './types';

/** Telemetry polls between two requests for one kernel's cells (10 s at the default 2 s). */
export const CELLS_EVERY_POLLS = 5;

interface IKernelCells {
  cells: Cell[] | null;
  /** Polls since it was last asked for. */
  age: number;
  loading: boolean;
  /** The server has no such kernel (shut down: its cells went with it). */
  gone: boolean;
}

export class KernelCells {
  /**
   * @param load - one kernel's cells (`GET api/gpu/kernels/<id>/cells`), null
   *   when the server has no such kernel
   * @param changed - called when a kernel's cells arrive changed, to redraw
   */
  constructor(
    load: (kernelId: string) => Promise<CellsReply | null>,
    changed: () => void
  ) {
    this._load = load;
    this._changed = changed;
  }

  /** A kernel's cells as last fetched, null before; asking keeps them fetched. */
  readonly of = (kernelId: string): Cell[] | null => {
    this._wanted.add(kernelId);
    return this._kernels.get(kernelId)?.cells ?? null;
  };

  /** A telemetry poll came while the dashboard is on screen. */
  poll(): void {
    for (const id of this._kernels.keys()) {
      if (!this._wanted.has(id)) {
        this._kernels.delete(id);
      }
    }
    for (const id of this._wanted) {
      let k = this._kernels.get(id);
      if (!k) {
        k = { cells: null, age: Infinity, loading: false, gone: false };
        this._kernels.set(id, k);
      }
      k.age += 1;
      if (k.loading || k.gone || k.age < CELLS_EVERY_POLLS) {
        continue;
      }
      k.age = 0;
      k.loading = true;
      const kernel = k;
      this._load(id).then(
        reply => {
          kernel.loading = false;
          if (reply === null) {
            kernel.gone = true;
          } else if (!sameCells(kernel.cells, reply.cells)) {
            kernel.cells = reply.cells;
            this._changed();
          }
        },
        () => {
          // a failed request: the markers stay as they were, and it is asked again later
          kernel.loading = false;
        }
      );
    }
    this._wanted = new Set();
  }

  private _load: (kernelId: string) => Promise<CellsReply | null>;
  private _changed: () => void;
  private _kernels = new Map<string, IKernelCells>();
  private _wanted = new Set<string>();
}

/** The same cells (a kernel appends cells, and drops its oldest past 1,000). */
function sameCells(a: Cell[] | null, b: Cell[]): boolean {
  if (a === null || a.length !== b.length) {
    return false;
  }
  const x = a[a.length - 1];
  const y = b[b.length - 1];
  return x === y || (x.pid === y.pid && x.seq === y.seq);
}
