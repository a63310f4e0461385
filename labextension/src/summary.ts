/**
 * The one-line summary shown in the status bar. Pure: takes the model's
 * figures, returns text and tooltip.
 */
import {
  formatBytes,
  formatBytesOf,
  formatPercent,
  MemoryUnits
} from './format';
import { deviceLabel } from './shape';
import type { GpuSample } from './types';

export interface ISummarySource {
  error: string | null;
  loaded: boolean;
  available: boolean | null;
  reason: string | null;
  simulated: boolean;
  busiest: GpuSample | null;
  /** GPU memory held by kernels the server flags as idle holders. */
  idleHeld: number;
  settings: { memoryUnits: MemoryUnits };
}

export function statusText(m: ISummarySource): { text: string; title: string } {
  if (m.error && !m.loaded) {
    return { text: 'GPU: offline', title: m.error };
  }
  if (m.available === null) {
    return { text: 'GPU …', title: 'Waiting for GPU figures' };
  }
  if (!m.available) {
    return { text: 'no GPU', title: m.reason ?? 'No usable GPU' };
  }
  const g = m.busiest;
  if (!g) {
    return {
      text: 'GPU: lost',
      title: 'None of the selected GPUs is answering'
    };
  }
  const util = formatPercent(g.utilization_gpu_percent);
  const mem = formatBytesOf(
    g.memory_used_bytes,
    g.memory_total_bytes,
    m.settings.memoryUnits
  );
  const sim = m.simulated ? ' (simulated)' : '';
  const label = deviceLabel(g);
  const idle =
    m.idleHeld > 0 ? formatBytes(m.idleHeld, m.settings.memoryUnits) : null;
  return {
    text:
      `${label}: ${util} · ${mem}${m.simulated ? ' · sim' : ''}` +
      (idle ? ` · idle ${idle}` : ''),
    title:
      `Busiest GPU${sim}: ${label}, utilisation ${util}, memory ${mem}.` +
      (idle
        ? ` Idle kernels hold ${idle} of GPU memory: free it in the GPU panel.`
        : '') +
      (m.error ? ` ${m.error}` : '') +
      ' Click to open the GPU panel.'
  };
}
