/** Replies of the kernels route for the unit tests, with defaults a test overrides. */
import type { Kernel, KernelsReply } from '../types';

export function kernel(over: Partial<Kernel> = {}): Kernel {
  return {
    id: 'abcdef12-3456',
    name: 'python3',
    execution_state: 'idle',
    last_activity: 1764460800,
    connections: 1,
    idle_seconds: 60,
    memory_bytes: 0,
    idle_holding: false,
    cull_in_seconds: null,
    path: 'work/train.ipynb',
    pid: 4242,
    gpu_memory: [],
    allocator: null,
    allocator_state: 'no_stats',
    allocator_reason: 'no stats file: jupyter_gpu is not loaded in this kernel',
    memory_limit_bytes: null,
    assigned_gpus: null,
    ...over
  };
}

export function kernelsReply(
  kernels: Kernel[],
  over: Partial<KernelsReply> = {}
): KernelsReply {
  return {
    version: 1,
    available: true,
    state: 'ok',
    problem: null,
    reason: null,
    kernels,
    unattributed: [],
    hidden_processes: 0,
    idle_after_seconds: 900,
    idle_min_memory_bytes: 1024 ** 3,
    actions_allowed: true,
    ...over
  };
}
