/**
 * Data shaping between the REST replies and what the views draw.
 * Pure functions, no DOM, no JupyterLab imports: unit-tested in src/__tests__.
 */
import type {
  Device,
  GpuSample,
  Kernel,
  KernelsReply,
  MigDevice,
  Sample,
  UnattributedProcess
} from './types';

/**
 * A reply's history with every process list in place: a full reply leaves a
 * GPU's `processes` out where they repeat the sample before it (the server
 * sends an hour of 8 GPUs' 32 processes each only where they change). A GPU
 * is matched by its place, then its index; a lost GPU has no list to fill.
 */
export function fillProcesses(history: Sample[]): Sample[] {
  let before: Sample | undefined;
  return history.map(sample => {
    const prior = before;
    before = sample;
    if (
      !prior ||
      sample.gpus.every(g => g.state !== 'ok' || 'processes' in g)
    ) {
      return sample;
    }
    const gpus = sample.gpus.map((g, i) => {
      if (g.state !== 'ok' || 'processes' in g) {
        return g;
      }
      const p =
        prior.gpus[i]?.index === g.index
          ? prior.gpus[i]
          : prior.gpus.find(x => x.index === g.index);
      return { ...g, processes: p?.processes ?? null };
    });
    before = { ...sample, gpus };
    return before;
  });
}

/**
 * Merge newly fetched samples into the history kept by the browser: sorted by
 * time, one sample per timestamp (the newer copy wins), and only samples within
 * `windowSeconds` of the newest one.
 */
export function mergeHistory(
  existing: Sample[],
  incoming: Sample[],
  windowSeconds: number
): Sample[] {
  const byTime = new Map<number, Sample>();
  for (const s of existing) {
    byTime.set(s.t, s);
  }
  for (const s of incoming) {
    byTime.set(s.t, s);
  }
  const merged = Array.from(byTime.values()).sort((a, b) => a.t - b.t);
  if (merged.length === 0) {
    return merged;
  }
  const cutoff = merged[merged.length - 1].t - windowSeconds;
  let first = 0;
  while (first < merged.length && merged[first].t < cutoff) {
    first++;
  }
  return first === 0 ? merged : merged.slice(first);
}

/** Keep the GPUs selected by index; an empty selection keeps all of them. */
export function selectGpus<T extends { index: number }>(
  items: T[],
  indices: number[]
): T[] {
  if (!indices || indices.length === 0) {
    return items;
  }
  const wanted = new Set(indices);
  return items.filter(item => wanted.has(item.index));
}

/** Fraction of memory in use (0..1), or null when unknown. */
export function memoryFraction(g: GpuSample): number | null {
  // a lost GPU's sample has no readings at all
  const used = g.memory_used_bytes ?? null;
  const total = g.memory_total_bytes ?? null;
  if (used === null || total === null || !(total > 0)) {
    return null;
  }
  return used / total;
}

/**
 * The devices work runs on (nvitop's leaves): each GPU not split into MIG
 * devices, and each MIG device. A GPU in MIG mode holds its MIG devices'
 * memory, so a sum over devices takes either it or them: these are them.
 */
export function leafDevices<T extends IGpuRef>(gpus: T[]): T[] {
  const split = new Set<number>();
  gpus.forEach(g => g.mig && split.add(g.mig.parent_index));
  return gpus.filter(g => g.mig || !split.has(g.index));
}

/**
 * The MIG devices of a GPU among a sample's devices (listed after it).
 */
export function migDevicesOf<T extends IGpuRef>(gpus: T[], gpu: IGpuRef): T[] {
  return gpus.filter(
    x =>
      x.mig &&
      (gpu.uuid !== null && x.mig.parent_uuid !== null
        ? x.mig.parent_uuid === gpu.uuid
        : x.mig.parent_index === gpu.index)
  );
}

/**
 * The busiest healthy device: highest utilisation, then highest memory
 * fraction, over the leaf devices (a MIG device rather than its GPU). A device
 * whose utilisation is not reported (MIG) counts its memory fraction as its
 * utilisation. Returns null when no device is in state `ok`.
 */
export function busiestGpu(gpus: GpuSample[]): GpuSample | null {
  let best: GpuSample | null = null;
  let bestKey: [number, number] = [-1, -1];
  for (const g of leafDevices(gpus)) {
    if (g.state !== 'ok') {
      continue;
    }
    const memory = memoryFraction(g);
    const key: [number, number] = [
      g.utilization_gpu_percent ?? (memory === null ? -1 : memory * 100),
      memory ?? -1
    ];
    if (
      best === null ||
      key[0] > bestKey[0] ||
      (key[0] === bestKey[0] && key[1] > bestKey[1])
    ) {
      best = g;
      bestKey = key;
    }
  }
  return best;
}

/** Numeric fields of a GPU sample that can be charted. */
export type SeriesField =
  | 'utilization_gpu_percent'
  | 'utilization_memory_percent'
  | 'memory_used_bytes'
  | 'memory_reserved_bytes'
  | 'temperature_celsius'
  | 'power_watts'
  | 'clock_sm_mhz'
  | 'pcie_rx_bytes_per_second'
  | 'pcie_tx_bytes_per_second'
  | GpmField;

/**
 * GPU performance monitoring's fields (Hopper and later): null in a GPU's
 * first sample, null with a reason in `unsupported` on a GPU without GPM,
 * absent from servers that predate it.
 */
export type GpmField =
  | 'sm_active_percent'
  | 'sm_occupancy_percent'
  | 'tensor_active_percent'
  | 'tensor_hmma_active_percent'
  | 'tensor_imma_active_percent'
  | 'tensor_dfma_active_percent'
  | 'dram_active_percent'
  | 'nvlink_rx_bytes_per_second'
  | 'nvlink_tx_bytes_per_second';

/**
 * A GPU as the replies name it: NVML's index, and its UUID unless NVML could
 * not read it; a MIG device also where it sits (`mig`; absent from older servers).
 */
export interface IGpuRef {
  index: number;
  uuid: string | null;
  mig?: MigDevice | null;
}

/**
 * How every view names a device: "GPU 0" (nvidia-smi's number), or for a MIG
 * device its GPU and profile, "GPU 0 · MIG 1g.18gb".
 */
export function deviceLabel(d: {
  index: number;
  mig?: MigDevice | null;
}): string {
  if (!d.mig) {
    return `GPU ${d.index}`;
  }
  const what = d.mig.profile ?? `GI ${d.mig.gpu_instance_id ?? '?'}`;
  return `GPU ${d.mig.parent_index} · MIG ${what}`;
}

/** The label of the device a kernels-reply row names (by UUID, else index) among `gpus`. */
export function rowLabel(
  gpus: IGpuRef[],
  row: { gpu_index: number; uuid: string | null }
): string {
  const ref = { index: row.gpu_index, uuid: row.uuid };
  return deviceLabel(gpus.find(g => sameGpu(g, ref)) ?? ref);
}

/** The same GPU: by UUID, or by index where a UUID is missing. */
export function sameGpu(a: IGpuRef, b: IGpuRef): boolean {
  return a.uuid !== null && b.uuid !== null
    ? a.uuid === b.uuid
    : a.index === b.index;
}

/** The notebook (or file) name of a kernel, for display. */
export function kernelLabel(kernel: Kernel): string {
  if (kernel.path) {
    const parts = kernel.path.split('/');
    return parts[parts.length - 1] || kernel.path;
  }
  return `${kernel.name} kernel ${kernel.id.slice(0, 8)}`;
}

/**
 * Why a kernel has no PyTorch allocator figures, for people; null when it has
 * them, or when jupyter_gpu is not loaded in it (the panel says how to load it).
 * A refusal says so, e.g. when another user's file holds the kernel's name in a
 * shared runtime dir: then loading jupyter_gpu again would not help.
 */
export function allocatorMissing(kernel: Kernel): string | null {
  const state = kernel.allocator_state;
  if (state === 'ok' || state === 'no_stats') {
    return null;
  }
  const reason = kernel.allocator_reason ?? state;
  return state === 'refused' ? `refused: ${reason}` : reason;
}

/** Total GPU memory a kernel's process tree holds, over the GPUs selected. */
export function kernelMemory(kernel: Kernel, indices: number[] = []): number {
  let total = 0;
  for (const m of selectGpus(
    kernel.gpu_memory.map(x => ({ ...x, index: x.gpu_index })),
    indices
  )) {
    total += m.used_memory_bytes ?? 0;
  }
  return total;
}

export interface IHolders {
  /** Kernels holding memory on a selected GPU (or publishing allocator figures), largest first. */
  kernels: Kernel[];
  /** Processes that belong to no kernel of this server, largest first. */
  unattributed: UnattributedProcess[];
  hidden: number;
}

/**
 * Who holds GPU memory on the selected GPUs: kernels with GPU memory or with
 * allocator figures, then unattributed processes, each sorted by memory.
 */
export function holders(
  reply: KernelsReply | null,
  indices: number[] = []
): IHolders {
  if (!reply || reply.state !== 'ok') {
    return {
      kernels: [],
      unattributed: [],
      hidden: reply?.hidden_processes ?? 0
    };
  }
  const kernels = reply.kernels
    .filter(k => kernelMemory(k, indices) > 0 || k.allocator_state === 'ok')
    .sort((a, b) => kernelMemory(b, indices) - kernelMemory(a, indices));
  const unattributed = selectGpus(
    reply.unattributed.map(u => ({ ...u, index: u.gpu_index })),
    indices
  ).sort((a, b) => (b.used_memory_bytes ?? 0) - (a.used_memory_bytes ?? 0));
  return { kernels, unattributed, hidden: reply.hidden_processes };
}

/** The device record for a sampled GPU, matched by UUID then by index. */
export function deviceFor(devices: Device[], g: IGpuRef): Device | undefined {
  return (
    devices.find(d => sameGpu(d, g)) ?? devices.find(d => d.index === g.index)
  );
}

/**
 * The GPU or MIG device with this UUID. PyTorch reports UUIDs without NVML's
 * prefix (`GPU-`, a MIG device's `MIG-`), and the kernel writes `GPU-` before
 * either, so every spelling matches.
 */
export function gpuForUuid<T extends IGpuRef>(
  gpus: T[],
  uuid: string | null | undefined
): T | null {
  if (!uuid) {
    return null;
  }
  const bare = (u: string) => u.replace(/^(GPU|MIG)-/i, '').toLowerCase();
  const want = bare(uuid);
  return gpus.find(g => g.uuid !== null && bare(g.uuid) === want) ?? null;
}
