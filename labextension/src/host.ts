/**
 * The container's limits as the panel states them (GET api/gpu/host). Pure: unit-tested in
 * src/__tests__/host.test.ts.
 */
import { formatBytes, formatBytesOf, MemoryUnits } from './format';
import type { HostReply } from './types';

/** "3.20 / 16.0 GiB of the container's memory limit", or null when there is no limit. */
export function hostMemory(
  host: HostReply | null,
  units: MemoryUnits = 'binary'
): string | null {
  const memory = host?.memory;
  if (!memory || memory.limit_bytes === null) {
    return null;
  }
  const killed = memory.oom_kills
    ? ` · ${memory.oom_kills} killed by the out-of-memory killer`
    : '';
  return `${formatBytesOf(memory.usage_bytes, memory.limit_bytes, units)} of the container's memory limit${killed}`;
}

/** "/dev/shm: 60.0 MiB free of 64.0 MiB" (DataLoader workers pass batches through it). */
export function hostShm(
  host: HostReply | null,
  units: MemoryUnits = 'binary'
): string | null {
  const shm = host?.shm;
  if (!shm || shm.size_bytes === null) {
    return null;
  }
  return `/dev/shm: ${formatBytes(shm.free_bytes, units)} free of ${formatBytes(shm.size_bytes, units)}`;
}
