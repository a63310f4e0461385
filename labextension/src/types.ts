/**
 * Shapes of the jupyter_gpu REST API (`{baseUrl}api/gpu/...`).
 *
 * Every numeric reading may be `null`; when a reading is not supported by the
 * device or driver, the reason is in the `unsupported` map under the field name.
 */

export type Unsupported = { [field: string]: string };

export interface IMigMode {
  current: boolean;
  pending: boolean;
}

export interface IDevice {
  index: number;
  uuid: string;
  name: string | null;
  pci_bus_id: string | null;
  memory_total_bytes: number | null;
  power_limit_watts: number | null;
  mig_mode: IMigMode | null;
  unsupported: Unsupported;
}

export interface IDevicesReply {
  available: boolean;
  reason: string | null;
  simulated: boolean;
  driver_version: string | null;
  cuda_driver_version: string | null;
  devices: IDevice[];
}

export interface IProcessMemory {
  pid: number;
  used_memory_bytes: number | null;
}

export interface IGpuSample {
  index: number;
  uuid: string;
  state: 'ok' | 'lost' | 'error';
  error: string | null;
  utilization_gpu_percent: number | null;
  utilization_memory_percent: number | null;
  memory_used_bytes: number | null;
  memory_reserved_bytes: number | null;
  memory_free_bytes: number | null;
  memory_total_bytes: number | null;
  temperature_celsius: number | null;
  fan_speed_percent?: number | null;
  power_watts: number | null;
  power_limit_watts: number | null;
  clock_sm_mhz: number | null;
  clock_mem_mhz: number | null;
  pcie_rx_bytes_per_second: number | null;
  pcie_tx_bytes_per_second: number | null;
  /** Only in the latest sample; history samples carry no process lists. */
  processes?: IProcessMemory[];
  unsupported: Unsupported;
}

export interface ISample {
  /** Unix time in seconds. */
  t: number;
  gpus: IGpuSample[];
}

export interface ITelemetryReply {
  available: boolean;
  reason: string | null;
  simulated: boolean;
  interval: number;
  now: number;
  latest: ISample | null;
  history: ISample[];
}

export interface IKernelGpuMemory {
  gpu_index: number;
  uuid: string;
  used_memory_bytes: number | null;
  pids: number[];
}

export interface IAllocatorDevice {
  index: number;
  uuid?: string | null;
  allocated_bytes: number | null;
  reserved_bytes: number | null;
  inactive_split_bytes: number | null;
  /** reserved − allocated: cached by PyTorch, free for its own tensors. */
  reserved_unallocated_bytes?: number | null;
  /** inactive_split_bytes / reserved_bytes, 0..1. */
  fragmentation: number | null;
  num_alloc_retries?: number | null;
  num_ooms?: number | null;
  [extra: string]: unknown;
}

export interface IAllocator {
  cuda_in_use: boolean;
  age_seconds: number;
  devices: IAllocatorDevice[];
}

export interface IKernel {
  id: string;
  name: string;
  execution_state: string;
  path: string | null;
  pid: number | null;
  gpu_memory: IKernelGpuMemory[];
  allocator: IAllocator | null;
  /** Why there are no allocator figures (e.g. jupyter_gpu not loaded in the kernel). */
  allocator_reason?: string | null;
}

export interface IUnattributed {
  pid: number;
  gpu_index: number;
  uuid: string;
  used_memory_bytes: number | null;
  user: string | null;
  command: string | null;
}

export interface IKernelsReply {
  available: boolean;
  reason: string | null;
  kernels: IKernel[];
  unattributed: IUnattributed[];
  hidden_processes: number;
}
