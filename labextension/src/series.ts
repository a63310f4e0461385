/**
 * Shaping of the telemetry history into the columns the time-series charts
 * draw (uPlot's columnar data). Pure functions, no DOM: unit-tested in
 * src/__tests__/series.test.ts.
 */
import {
  deviceLabel,
  IGpuRef,
  migDevicesOf,
  sameGpu,
  SeriesField
} from './shape';
import type { GpuSample, ProcessOwner, Sample } from './types';

/** uPlot's data: times (unix seconds), then one column per series. */
export type Columns = [number[], ...(number | null)[][]];

/** A time marked on a chart (a cell's start): a line, a short label, and what its hover says. */
export interface IChartMarker {
  t: number;
  /** Drawn at the top of the line, where it does not overlap the one before, e.g. "[7]". */
  label: string;
  /** Shown while the pointer is on the line, e.g. "course/train.ipynb [7]". */
  title: string;
  /** The label's colour (its notebook's); the theme's text colour without one. */
  colour?: string;
}

/**
 * The time range a chart shows: the history the server has, up to the
 * window, ending now. A reloaded page is full at once instead of a sliver at
 * the right edge; at least `minSpan` seconds, so a first sample is not a line.
 */
export function viewRange(
  history: Sample[],
  now: number,
  windowSeconds: number,
  minSpan = 30
): [number, number] {
  const oldest = history.length ? history[0].t : now;
  const t0 = Math.max(oldest, now - windowSeconds);
  return [Math.min(t0, now - minSpan), now];
}

/** The samples at or after `t0` (the history is sorted by time). */
export function windowCut(history: Sample[], t0: number): Sample[] {
  let lo = 0;
  let hi = history.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (history[mid].t < t0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo === 0 ? history : history.slice(lo);
}

/**
 * The GPU in each sample, or null when it is missing or lost (a gap). It is
 * looked for first where it was in the sample before: GPUs keep their order,
 * and a search of every sample's GPUs was the larger part of a redraw with 8
 * GPUs over an hour.
 */
export function gpuReader(gpu: IGpuRef): (sample: Sample) => GpuSample | null {
  let at = 0;
  return sample => {
    let g: GpuSample | undefined = sample.gpus[at];
    if (!g || !sameGpu(g, gpu)) {
      const i = sample.gpus.findIndex(x => sameGpu(x, gpu));
      g = i < 0 ? undefined : sample.gpus[i];
      at = Math.max(i, 0);
    }
    return g && g.state === 'ok' ? g : null;
  };
}

/**
 * Build columns over the samples: `values(g, sample)` gives a row of numbers
 * for a GPU reading, or nulls where the GPU was lost. Where samples lie more than
 * `maxGap` seconds apart (the server was down, the tab slept) a row of nulls
 * goes between them, so the lines break instead of bridging the gap.
 */
function columnsOf(
  history: Sample[],
  gpu: IGpuRef,
  width: number,
  values: (g: GpuSample, sample: Sample) => (number | null)[],
  maxGap: number
): Columns {
  const times: number[] = [];
  const cols: (number | null)[][] = Array.from({ length: width }, () => []);
  let last = -Infinity;
  const nulls = new Array<null>(width).fill(null);
  const gpuIn = gpuReader(gpu);
  for (const sample of history) {
    if (sample.t - last > maxGap && times.length > 0) {
      times.push((last + sample.t) / 2);
      nulls.forEach((v, i) => cols[i].push(v));
    }
    const g = gpuIn(sample);
    const row = g ? values(g, sample) : nulls;
    times.push(sample.t);
    row.forEach((v, i) => cols[i].push(v));
    last = sample.t;
  }
  return [times, ...cols];
}

function num(x: unknown): number | null {
  return typeof x === 'number' && isFinite(x) ? x : null;
}

/** One GPU's readings of some fields over the history, with gaps. */
export function fieldColumns(
  history: Sample[],
  gpu: IGpuRef,
  fields: (SeriesField | 'power_limit_watts' | 'memory_temperature_celsius')[],
  maxGap: number
): Columns {
  return columnsOf(
    history,
    gpu,
    fields.length,
    g => fields.map(f => num(g[f])),
    maxGap
  );
}

/** Who a layer of the memory stack is: a GPU in MIG mode's are its MIG devices. */
export type HolderKind = 'notebook' | 'processes' | 'mig' | 'driver';

export interface IMemoryLayer {
  kind: HolderKind;
  /** The notebook's path, "GPU 0 · MIG 1g.18gb", or "other processes", "driver / other". */
  label: string;
  /** The kernel, for a notebook layer. */
  kernelId: string | null;
  /** The MIG device's UUID, for a MIG device's layer. */
  device?: string;
}

/** A layer's place in a row of the stack. */
function layerKey(layer: IMemoryLayer): string {
  return layer.kernelId ?? layer.device ?? layer.kind;
}

export interface IMemoryStack {
  /** Bottom to top: notebooks (largest peak first), other processes, driver / other. */
  layers: IMemoryLayer[];
  /** Each layer's own bytes per row (for hover values). */
  raw: (number | null)[][];
  /** Times, then each layer's top edge (the running sum from the bottom). */
  stacked: Columns;
}

/**
 * Who held one GPU's memory over the history, bottom to top: each notebook of
 * this server that held some (largest peak first), other processes, and
 * "driver / other"; for a GPU in MIG mode, each of its MIG devices (which list
 * the processes) and "driver / other". Apart from memoryStack: a chart needs
 * its layers (its series) even while out of view, where the stack itself is
 * not drawn.
 */
export function memoryLayers(
  history: Sample[],
  gpu: IGpuRef,
  owners: ProcessOwner[]
): IMemoryLayer[] {
  const migs = new Map<string, IMemoryLayer>();
  for (const sample of history) {
    for (const m of migDevicesOf(sample.gpus, gpu)) {
      const device = m.uuid ?? deviceLabel(m);
      migs.set(device, {
        kind: 'mig',
        label: deviceLabel(m),
        kernelId: null,
        device
      });
    }
  }
  if (migs.size) {
    const driver: IMemoryLayer = {
      kind: 'driver',
      label: 'driver / other',
      kernelId: null
    };
    return [...migs.values(), driver];
  }
  const byPid = new Map(owners.map(o => [o.pid, o]));
  const peak = new Map<string, number>();
  const notebooks = new Map<string, IMemoryLayer>();
  const gpuIn = gpuReader(gpu);
  const held = new Map<string, number>(); // one sample's, reused: no map per sample
  for (const sample of history) {
    const g = gpuIn(sample);
    held.clear();
    for (const p of g?.processes ?? []) {
      const o = byPid.get(p.pid);
      if (o) {
        held.set(
          o.kernel_id,
          (held.get(o.kernel_id) ?? 0) + (p.used_memory_bytes ?? 0)
        );
        if (!notebooks.has(o.kernel_id)) {
          notebooks.set(o.kernel_id, {
            kind: 'notebook',
            label: o.path ?? `${o.name} kernel ${o.kernel_id.slice(0, 8)}`,
            kernelId: o.kernel_id
          });
        }
      }
    }
    held.forEach((v, k) => peak.set(k, Math.max(peak.get(k) ?? 0, v)));
  }
  return [
    ...Array.from(notebooks.values()).sort(
      (a, b) => (peak.get(b.kernelId!) ?? 0) - (peak.get(a.kernelId!) ?? 0)
    ),
    { kind: 'processes', label: 'other processes', kernelId: null },
    { kind: 'driver', label: 'driver / other', kernelId: null }
  ];
}

/**
 * One GPU's used memory over time, split by who held it (memoryLayers): each
 * notebook of this server (its processes, via the server's `owners`), other
 * processes, and what no listed process accounts for (the driver's
 * per-process share, processes NVML did not list); a GPU in MIG mode's by its
 * MIG devices, whose own charts split theirs by notebook.
 */
export function memoryStack(
  history: Sample[],
  gpu: IGpuRef,
  owners: ProcessOwner[],
  maxGap: number,
  layers: IMemoryLayer[] = memoryLayers(history, gpu, owners)
): IMemoryStack {
  const byPid = new Map(owners.map(o => [o.pid, o]));
  const slot = new Map(layers.map((l, i) => [layerKey(l), i]));
  const byMig = layers.some(l => l.kind === 'mig');
  const raw = columnsOf(
    history,
    gpu,
    layers.length,
    (g, sample) => {
      const row = new Array<number>(layers.length).fill(0);
      let listed = 0;
      for (const m of byMig ? migDevicesOf(sample.gpus, g) : []) {
        const bytes = m.memory_used_bytes ?? 0;
        row[slot.get(m.uuid ?? deviceLabel(m))!] += bytes;
        listed += bytes;
      }
      for (const p of byMig ? [] : (g.processes ?? [])) {
        const bytes = p.used_memory_bytes ?? 0;
        const o = byPid.get(p.pid);
        row[slot.get(o ? o.kernel_id : 'processes')!] += bytes;
        listed += bytes;
      }
      row[layers.length - 1] = Math.max(0, (g.memory_used_bytes ?? 0) - listed);
      return row;
    },
    maxGap
  );
  const [times, ...own] = raw;
  const stacked: (number | null)[][] = own.map(() => []);
  for (let r = 0; r < times.length; r++) {
    let sum = 0;
    own.forEach((col, i) => {
      const v = col[r];
      sum += v ?? 0;
      stacked[i].push(v === null ? null : sum);
    });
  }
  return { layers, raw: own, stacked: [times, ...stacked] };
}
