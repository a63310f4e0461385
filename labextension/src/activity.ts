/**
 * What the GPU really did (GPU performance monitoring, Hopper and later):
 * what each activity figure means, whether a GPU can chart one, and the rule
 * behind the "busy but mostly idle SMs" hint. NVML's utilisation is the share
 * of time any kernel ran, so one tiny kernel in flight reads 100%; SM active
 * is the share of SMs busy. Pure functions, no DOM: unit-tested in
 * src/__tests__/activity.test.ts.
 */
import { formatPercent } from './format';
import { gpuReader } from './series';
import type { GpmField, IGpuRef } from './shape';
import type { GpuSample, Sample } from './types';

/** One sentence per figure, for the hovers of the charts that draw them. */
export const MEANING = {
  utilisation:
    'GPU busy (NVML utilisation): the share of time any kernel ran; a single tiny kernel in flight reads 100%.',
  memoryBusy:
    'memory busy: the share of time device memory was read or written.',
  smActive:
    'SM active: the share of the streaming multiprocessors (SMs) that were busy, averaged over time: how much of the GPU the work really used.',
  tensorActive:
    'tensor active: the share of time the tensor cores ran matrix maths (fp16, bf16, tf32, int8 or fp64).',
  pcie: 'PCIe: bytes per second received (rx) and sent (tx) over PCIe, to and from the host.',
  nvlink:
    "NVLink: bytes per second received (rx) and sent (tx) over all of the GPU's NVLinks, to and from other GPUs."
};

/**
 * How a GPU's chart of a GPM figure shows: `chart` where the server reports
 * it (null until the GPU's second sample), `{ reason }` in its place where
 * the GPU cannot give it (no GPM, or a metric NVML lacks), `none` where the
 * server predates GPM. A lost GPU keeps its chart: its history has figures.
 */
export type GpmView = 'chart' | 'none' | { reason: string };

export function gpmView(g: GpuSample, field: GpmField): GpmView {
  if (g.state !== 'ok') {
    return 'chart';
  }
  const why = g.unsupported?.[field];
  if ((g[field] ?? null) === null && why) {
    return { reason: why };
  }
  return field in g ? 'chart' : 'none';
}

/** When the hint shows: its thresholds, and how far back it looks. */
export const LAUNCH_BOUND = {
  /** Looked back over, from the newest sample. */
  seconds: 10,
  /** Mean utilisation at or above this (percent)... */
  busy: 80,
  /** ...while mean SM active stays below this (percent). */
  idleSms: 20,
  /** Samples with both figures needed: one sample is no trend. */
  readings: 3
};

export interface ILaunchBound {
  /** Mean NVML utilisation over the samples looked at (percent). */
  utilisation: number;
  /** Mean SM active over the same samples (percent). */
  smActive: number;
}

/**
 * Busy but mostly idle SMs: over the last `seconds` of the history, one GPU's
 * utilisation averages at least `busy` while its SM active averages below
 * `idleSms`: kernels run back to back but each fills few SMs, as in a
 * launch-bound or single-stream loop of small kernels. The means, or null
 * when the rule does not hold or too few samples carry both figures.
 */
export function launchBound(
  history: Sample[],
  gpu: IGpuRef,
  rule = LAUNCH_BOUND
): ILaunchBound | null {
  if (history.length === 0) {
    return null;
  }
  const since = history[history.length - 1].t - rule.seconds;
  const gpuIn = gpuReader(gpu);
  let n = 0;
  let utilisation = 0;
  let smActive = 0;
  for (let i = history.length - 1; i >= 0 && history[i].t >= since; i--) {
    const g = gpuIn(history[i]);
    const u = g?.utilization_gpu_percent;
    const sm = g?.sm_active_percent;
    if (typeof u === 'number' && typeof sm === 'number') {
      n++;
      utilisation += u;
      smActive += sm;
    }
  }
  if (n < rule.readings) {
    return null;
  }
  const means = { utilisation: utilisation / n, smActive: smActive / n };
  return means.utilisation >= rule.busy && means.smActive < rule.idleSms
    ? means
    : null;
}

/** The hint's words, with the figures that raised it. */
export function launchBoundHint(lb: ILaunchBound): string {
  return (
    `Busy but mostly idle SMs: ${formatPercent(lb.utilisation)} utilisation, ` +
    `${formatPercent(lb.smActive, 'fine')} SM active over the last ` +
    `${LAUNCH_BOUND.seconds} s, as in a launch-bound or single-stream loop ` +
    'of small kernels. Larger batches or fused kernels would use more of the GPU.'
  );
}
