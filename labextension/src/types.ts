/**
 * Shapes of the jupyter_gpu REST API (`{baseUrl}api/gpu/...`), generated from
 * jupyter_gpu/server/schema/*.schema.json by `jlpm build:schema`: edit the schemas, not this file.
 */

/**
 * Whether the server can read its GPUs through NVML: 'starting' before the first attempt, 'ok', or 'unavailable' (`problem` says why, `reason` says it to people with what to do).
 */
export type NvmlState = 'starting' | 'ok' | 'unavailable';
/**
 * What keeps NVML from working, as the one error table (jupyter_gpu/nvml/reasons.py) names it: no driver library, driver not loaded, no permission on /dev/nvidia*, kernel module and library versions differ, no GPU, or 'other'. Null unless `state` is 'unavailable'; `reason` is the same entry's sentence.
 */
export type NvmlProblem =
  | 'library_not_found'
  | 'driver_not_loaded'
  | 'no_permission'
  | 'version_mismatch'
  | 'no_devices'
  | 'other'
  | null;
/**
 * 'ok', or 'lost': the GPU stopped answering (fell off the bus, needs a reset).
 */
export type GpuState = 'ok' | 'lost';
/**
 * One of NVML's clocks event reasons (formerly throttle reasons).
 */
export type ClockThrottleReason =
  | 'gpu_idle'
  | 'applications_clocks_setting'
  | 'sw_power_cap'
  | 'hw_slowdown'
  | 'sync_boost'
  | 'sw_thermal_slowdown'
  | 'hw_thermal_slowdown'
  | 'hw_power_brake_slowdown'
  | 'display_clock_setting';
/**
 * Whether there are PyTorch allocator figures for the kernel: 'ok'; 'no_cuda' (the agent runs, PyTorch has not initialised CUDA); 'no_stats' (no stats file: jupyter_gpu is not loaded in the kernel); 'refused' (a file not to be trusted: a symlink, another user's, writable by others, ...; the reason is 'a file of another user holds this kernel's name' when another user's file sits at the kernel's name in a shared runtime dir and the kernel has no file at its private name); 'malformed' (not the agent's format); 'stale' (too old, or its process is gone).
 */
export type AllocatorState =
  'ok' | 'no_cuda' | 'no_stats' | 'refused' | 'malformed' | 'stale';
/**
 * How the cell ended: 'ok', 'error', 'oom' (CUDA out of memory) or 'interrupted'.
 */
export type CellOutcome = 'ok' | 'error' | 'oom' | 'interrupted';
/**
 * 'oom_killed': ended by SIGKILL while the out-of-memory killer's count in its memory cgroup rose; 'gpu_error': NVML reported an Xid on a GPU it used while it ran; 'signal': another signal, or SIGKILL without the count rising; 'exited': it exited by itself.
 */
export type ExitCause = 'oom_killed' | 'gpu_error' | 'signal' | 'exited';

/**
 * The routes under {base_url}api/gpu/, each named by its path with its reply's schema. Not itself a reply: where tools (the TypeScript generator, the tests) start.
 */
export interface Replies {
  devices: DevicesReply;
  telemetry: TelemetryReply;
  kernels: KernelsReply;
  cells: CellsReply;
  free_cache: FreeCacheReply;
  host: HostReply;
  exits: ExitsReply;
  server_stop_notice: ServerStopNoticeReply;
}
/**
 * GET {base_url}api/gpu/devices: the driver and what does not change about each GPU (and each MIG device) while the server runs.
 */
export interface DevicesReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  /**
   * True exactly when `state` is 'ok' (kept for clients that only ask yes or no).
   */
  available: boolean;
  state: NvmlState;
  problem: NvmlProblem;
  /**
   * Why `state` is not 'ok', for people: what is wrong and how to fix it. Null when it is 'ok'. Show it, never parse it: `state` is for programs.
   */
  reason: string | null;
  /**
   * The readings come from the simulated backend (a recording), not from this machine's GPUs.
   */
  simulated: boolean;
  /**
   * e.g. '580.159.04'.
   */
  driver_version: string | null;
  /**
   * The newest CUDA the driver supports, e.g. '13.0'.
   */
  cuda_driver_version: string | null;
  /**
   * Empty unless `state` is 'ok'.
   */
  devices: Device[];
}
/**
 * One GPU as NVML numbers it (NVML ignores CUDA_VISIBLE_DEVICES), or one MIG device of a GPU in MIG mode, listed right after its GPU. A null field's reason is in `unsupported`.
 */
export interface Device {
  /**
   * A GPU's NVML index (nvidia-smi's); MIG devices are numbered after all GPUs, in the order listed.
   */
  index: number;
  /**
   * NVML's UUID of the GPU ('GPU-…') or MIG device ('MIG-…'); null if NVML could not read it.
   */
  uuid: string | null;
  /**
   * e.g. 'NVIDIA H200'.
   */
  name: string | null;
  pci_bus_id: string | null;
  memory_total_bytes: number | null;
  /**
   * The enforced power limit.
   */
  power_limit_watts: number | null;
  /**
   * Multi-Instance GPU mode; null where MIG is not supported, and on a MIG device.
   */
  mig_mode: MigMode | null;
  /**
   * Null for a whole GPU; for a MIG device, where it sits.
   */
  mig: MigDevice | null;
  unsupported: Unsupported;
}
export interface MigMode {
  current: boolean;
  /**
   * The mode after the next GPU reset.
   */
  pending: boolean;
}
/**
 * Where a MIG device sits: a Multi-Instance GPU slice, listed as a device of its own (its UUID, memory and processes) after its GPU, as nvitop and dcgm-exporter show them. What belongs to the whole GPU (temperature, power, clocks, PCIe, ...) is null on it, with its reason in `unsupported` ('GPU-wide: see GPU <parent_index>'); its processes are listed on it alone, never also on its GPU.
 */
export interface MigDevice {
  /**
   * NVML's index of the GPU it is part of.
   */
  parent_index: number;
  /**
   * NVML's UUID of the GPU ('GPU-…') or MIG device ('MIG-…'); null if NVML could not read it.
   */
  parent_uuid: string | null;
  /**
   * NVML's GPU instance id (nvidia-smi's GI, dcgm-exporter's GPU_I_ID); null if NVML could not read it.
   */
  gpu_instance_id: number | null;
  /**
   * NVML's compute instance id within the GPU instance (nvidia-smi's CI); null if NVML could not read it.
   */
  compute_instance_id: number | null;
  /**
   * The MIG profile, e.g. '1g.18gb' (dcgm-exporter's GPU_I_PROFILE); null when its name has none.
   */
  profile: string | null;
}
/**
 * Reading name → why it is null (not supported by this GPU or driver, or the read failed), for people.
 */
export interface Unsupported {
  [k: string]: string;
}
/**
 * GET {base_url}api/gpu/telemetry[?since=<unix seconds>]: the latest sample, and the history the server keeps (only samples newer than `since` when given).
 */
export interface TelemetryReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  /**
   * True exactly when `state` is 'ok' (kept for clients that only ask yes or no).
   */
  available: boolean;
  state: NvmlState;
  problem: NvmlProblem;
  /**
   * Why `state` is not 'ok', for people: what is wrong and how to fix it. Null when it is 'ok'. Show it, never parse it: `state` is for programs.
   */
  reason: string | null;
  /**
   * The readings come from the simulated backend (a recording), not from this machine's GPUs.
   */
  simulated: boolean;
  /**
   * Seconds between samples.
   */
  interval: number;
  /**
   * The server's clock (unix seconds) when it answered.
   */
  now: number;
  /**
   * The kernel (and notebook) of each GPU process this server attributed, as last seen: the most recent 256 PIDs. A process not listed belongs to no kernel of this server, or was never seen by a kernel refresh.
   *
   * @maxItems 256
   */
  owners: ProcessOwner[];
  /**
   * The newest sample, with process lists; null until the first sample and unless `state` is 'ok'.
   */
  latest: Sample | null;
  /**
   * Samples oldest first, with the 32 largest processes of each GPU and without memory error counts; empty unless `state` is 'ok'. Without `since` (a page load's reply), samples before the minute that holds the time 10 minutes before the newest (minutes aligned to the Unix epoch) are thinned to one per 3 seconds (the newest of each), and a sample whose process lists are those of the sample before it in the reply leaves `processes` out.
   */
  history: Sample[];
}
/**
 * A GPU process that belongs to a kernel of this server (it or an ancestor is the kernel's process).
 */
export interface ProcessOwner {
  pid: number;
  kernel_id: string;
  /**
   * The kernel's spec name, e.g. python3.
   */
  name: string;
  /**
   * The notebook the kernel runs for; null for a kernel without a session.
   */
  path: string | null;
}
/**
 * One reading of every GPU.
 */
export interface Sample {
  /**
   * Unix time in seconds.
   */
  t: number;
  gpus: GpuSample[];
}
/**
 * One GPU (or MIG device) in one sample. A GPU in state 'ok' has every reading (null with its reason in `unsupported` when it could not be read); a lost GPU has none.
 */
export interface GpuSample {
  /**
   * NVML's index of the GPU; a MIG device's as the devices reply numbers it.
   */
  index: number;
  /**
   * NVML's UUID of the GPU ('GPU-…') or MIG device ('MIG-…'); null if NVML could not read it.
   */
  uuid: string | null;
  /**
   * Null for a whole GPU; for a MIG device, where it sits (as in the devices reply).
   */
  mig: MigDevice | null;
  state: GpuState;
  /**
   * What happened to a lost GPU, for people; null when 'ok'.
   */
  error: string | null;
  /**
   * Used by processes (NVML memory info v2: without the driver's reserve).
   */
  memory_used_bytes?: number | null;
  /**
   * Reserved by the driver.
   */
  memory_reserved_bytes?: number | null;
  memory_free_bytes?: number | null;
  memory_total_bytes?: number | null;
  /**
   * Share of time a kernel ran on the GPU.
   */
  utilization_gpu_percent?: number | null;
  /**
   * Share of time device memory was read or written.
   */
  utilization_memory_percent?: number | null;
  temperature_celsius?: number | null;
  power_watts?: number | null;
  /**
   * The enforced power limit.
   */
  power_limit_watts?: number | null;
  clock_sm_mhz?: number | null;
  clock_mem_mhz?: number | null;
  fan_speed_percent?: number | null;
  /**
   * Averaged since the sample before where the GPU has GPU performance monitoring; otherwise NVML's counter, read on a slower cadence than the other fields. Null until the first reading.
   */
  pcie_rx_bytes_per_second?: number | null;
  /**
   * As pcie_rx_bytes_per_second.
   */
  pcie_tx_bytes_per_second?: number | null;
  /**
   * The share of SMs busy, over time: what utilization_gpu_percent is mistaken for (a single tiny kernel in flight reads 100% there and under 1% here). From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  sm_active_percent?: number | null;
  /**
   * Resident warps against the SMs' maximum. From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  sm_occupancy_percent?: number | null;
  /**
   * The share of time tensor cores ran, any precision. From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  tensor_active_percent?: number | null;
  /**
   * Tensor cores on fp16, bf16 or tf32 (HMMA). From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  tensor_hmma_active_percent?: number | null;
  /**
   * Tensor cores on int8 (IMMA). From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  tensor_imma_active_percent?: number | null;
  /**
   * Tensor cores on fp64 (DFMA). From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  tensor_dfma_active_percent?: number | null;
  /**
   * Device memory bandwidth used against its maximum. From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  dram_active_percent?: number | null;
  /**
   * Received over all NVLinks. From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  nvlink_rx_bytes_per_second?: number | null;
  /**
   * Sent over all NVLinks. From GPU performance monitoring (Hopper and later), averaged since the sample before; null in a GPU's first sample. Absent in replies from servers that predate GPM support.
   */
  nvlink_tx_bytes_per_second?: number | null;
  /**
   * Energy used since the driver loaded (NVML's total energy consumption); grows until the driver reloads.
   */
  energy_joules?: number | null;
  /**
   * Why the clocks are below their maximum now (NVML's clocks event reasons); empty when nothing holds them back.
   */
  clock_throttle_reasons?: ClockThrottleReason[] | null;
  /**
   * Device memory (HBM) temperature. Read on the slower cadence; null until the first such reading.
   */
  memory_temperature_celsius?: number | null;
  /**
   * Corrected (single-bit) ECC errors since the driver loaded. Only in `latest`; read on the slower cadence.
   */
  ecc_corrected_volatile?: number | null;
  /**
   * Uncorrected (double-bit) ECC errors since the driver loaded. Only in `latest`; read on the slower cadence.
   */
  ecc_uncorrected_volatile?: number | null;
  /**
   * Corrected ECC errors over the GPU's life. Only in `latest`; read on the slower cadence.
   */
  ecc_corrected_aggregate?: number | null;
  /**
   * Uncorrected ECC errors over the GPU's life. Only in `latest`; read on the slower cadence.
   */
  ecc_uncorrected_aggregate?: number | null;
  /**
   * Pages retired after repeated single-bit errors (GPUs before Ampere). Only in `latest`; read on the slower cadence.
   */
  retired_pages_single_bit?: number | null;
  /**
   * Pages retired after a double-bit error (GPUs before Ampere). Only in `latest`; read on the slower cadence.
   */
  retired_pages_double_bit?: number | null;
  /**
   * A page waits for retirement at the next driver reload. Only in `latest`; read on the slower cadence.
   */
  retired_pages_pending?: boolean | null;
  /**
   * Memory rows remapped after correctable errors (Ampere and later). Only in `latest`; read on the slower cadence.
   */
  remapped_rows_correctable?: number | null;
  /**
   * Memory rows remapped after uncorrectable errors (Ampere and later). Only in `latest`; read on the slower cadence.
   */
  remapped_rows_uncorrectable?: number | null;
  /**
   * A remapping waits for a GPU reset. Only in `latest`; read on the slower cadence.
   */
  remapped_rows_pending?: boolean | null;
  /**
   * A remapping failed: the GPU needs service. Only in `latest`; read on the slower cadence.
   */
  remapped_rows_failed?: boolean | null;
  /**
   * Compute processes on this GPU (in `history`, the 32 largest). Null when NVML could not list them, and on a GPU whose MIG devices list them. Left out in a full history's sample whose lists repeat the sample before it (the same as there).
   */
  processes?: GpuProcess[] | null;
  unsupported: Unsupported;
}
export interface GpuProcess {
  /**
   * As NVML reports it: in a container, possibly another PID namespace's.
   */
  pid: number;
  /**
   * Null when the driver withholds it.
   */
  used_memory_bytes: number | null;
}
/**
 * GET {base_url}api/gpu/kernels: this server's kernels with the GPU memory their process trees hold and the PyTorch allocator figures their agents publish, then the GPU processes that are none of its kernels.
 */
export interface KernelsReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  /**
   * True exactly when `state` is 'ok' (kept for clients that only ask yes or no).
   */
  available: boolean;
  state: NvmlState;
  problem: NvmlProblem;
  /**
   * Why `state` is not 'ok', for people: what is wrong and how to fix it. Null when it is 'ok'. Show it, never parse it: `state` is for programs.
   */
  reason: string | null;
  /**
   * Every kernel of this server, with or without GPU memory.
   */
  kernels: Kernel[];
  unattributed: UnattributedProcess[];
  /**
   * GPU processes of other users left out (the server's show_all_users is off).
   */
  hidden_processes: number;
  /**
   * c.GPUMonitor.idle_after: how long a kernel sits idle before `idle_holding`.
   */
  idle_after_seconds: number;
  /**
   * c.GPUMonitor.idle_min_memory: how much GPU memory an idle kernel holds before `idle_holding`.
   */
  idle_min_memory_bytes: number;
  /**
   * Whether the user asking may act on kernels (jupyter_server's authorizer grants resource 'kernels', action 'write'): free cache, interrupt, restart, shut down.
   */
  actions_allowed: boolean;
}
export interface Kernel {
  id: string;
  /**
   * The kernel spec's name, e.g. 'python3'.
   */
  name: string;
  /**
   * As jupyter_server reports it, e.g. 'idle' or 'busy'; 'starting' also for a kernel listed before jupyter_server has finished starting it (`last_activity` null then).
   */
  execution_state: string | null;
  /**
   * When jupyter_server's kernel manager last saw activity on the kernel (unix seconds).
   */
  last_activity: number | null;
  /**
   * Open websocket connections to the kernel (notebook tabs, consoles), as the kernel manager counts them.
   */
  connections: number;
  /**
   * Seconds since `last_activity` while the kernel is idle; null while it is busy, starting, restarting or dead.
   */
  idle_seconds: number | null;
  /**
   * GPU memory the kernel's process tree holds, over all GPUs.
   */
  memory_bytes: number;
  /**
   * Idle at least `idle_after_seconds` while holding at least `idle_min_memory_bytes` of GPU memory.
   */
  idle_holding: boolean;
  /**
   * The GPU memory quota the kernel started with (c.GPUMonitor.kernel_memory_limit, or JUPYTER_GPU_KERNEL_MEMORY_LIMIT), per GPU, as PyTorch's allocator limit; null for none.
   */
  memory_limit_bytes: number | null;
  /**
   * The UUIDs of the GPUs (or MIG devices) c.GPUMonitor.assign_gpus gave the kernel in its CUDA_VISIBLE_DEVICES; null when it assigned none (assignment off, or the kernel started with CUDA_VISIBLE_DEVICES of its own).
   *
   * @maxItems 64
   */
  assigned_gpus: string[] | null;
  /**
   * Seconds until the GPU culler shuts the kernel down if it stays idle; null when it would not (culler off, busy, too little memory, connected and spared).
   */
  cull_in_seconds: number | null;
  /**
   * The notebook (or file) of the kernel's session; null without a session.
   */
  path: string | null;
  /**
   * Only local kernels have one.
   */
  pid: number | null;
  /**
   * Per GPU, memory held by the kernel's process and its descendants.
   */
  gpu_memory: KernelGpuMemory[];
  /**
   * What the kernel's agent last published; present in states 'ok' and 'no_cuda'.
   */
  allocator: AllocatorFigures | null;
  allocator_state: AllocatorState;
  /**
   * Why `allocator_state` is not 'ok', for people; null when it is.
   */
  allocator_reason: string | null;
}
export interface KernelGpuMemory {
  gpu_index: number;
  /**
   * NVML's UUID of the GPU ('GPU-…') or MIG device ('MIG-…'); null if NVML could not read it.
   */
  uuid: string | null;
  used_memory_bytes: number;
  pids: number[];
}
/**
 * The kernel's stats file as the server validated it.
 */
export interface AllocatorFigures {
  /**
   * Version of the stats file's format (not of this API).
   */
  version: number;
  kernel_id: string;
  /**
   * The process that wrote the file.
   */
  pid: number;
  /**
   * When it was written (unix seconds).
   */
  time: number;
  /**
   * Whether PyTorch has initialised CUDA in the kernel.
   */
  cuda_in_use: boolean;
  devices: AllocatorDevice[];
  age_seconds: number;
}
/**
 * PyTorch's caching allocator on one CUDA device of the kernel.
 */
export interface AllocatorDevice {
  /**
   * The CUDA index in the kernel (cuda:N), which follows CUDA_VISIBLE_DEVICES.
   */
  index: number;
  /**
   * PyTorch's UUID of the device, with or without NVML's 'GPU-' prefix.
   */
  uuid: string | null;
  /**
   * In live tensors.
   */
  allocated_bytes: number;
  /**
   * Held from the driver by the caching allocator.
   */
  reserved_bytes: number;
  active_bytes: number;
  requested_bytes: number;
  /**
   * Free memory trapped in segments that hold live blocks.
   */
  inactive_split_bytes: number;
  /**
   * reserved − allocated: cached by PyTorch, free for its own tensors.
   */
  reserved_unallocated_bytes: number;
  /**
   * inactive_split_bytes / reserved_bytes: memory empty_cache() cannot return.
   */
  fragmentation: number | null;
  num_alloc_retries: number;
  num_ooms: number;
  peak_allocated_bytes: number;
  /**
   * Per pool, from the last allocator snapshot; null before one was taken.
   */
  largest_free_block_bytes: PoolSizes | null;
  segments: number | null;
  snapshot_time: number | null;
  expandable_segments: boolean | null;
}
export interface PoolSizes {
  large: number;
  small: number;
}
/**
 * A GPU process that is no kernel of this server (or whose PID cannot be checked here, e.g. in a container).
 */
export interface UnattributedProcess {
  pid: number;
  gpu_index: number;
  /**
   * NVML's UUID of the GPU ('GPU-…') or MIG device ('MIG-…'); null if NVML could not read it.
   */
  uuid: string | null;
  /**
   * Null when the driver withholds it.
   */
  used_memory_bytes: number | null;
  user: string | null;
  command: string | null;
  /**
   * Why no kernel of this server is given it, for people, where its user and command do not say it: a process of another PID namespace (which kernels could not claim it), or one two kernels claim; null for a process of this namespace that is no kernel's.
   */
  reason: string | null;
}
/**
 * GET {base_url}api/gpu/kernels/<kernel_id>/cells[?since=<cursor>][&limit=<n>]: what each executed cell of the kernel did to GPU memory, oldest first. The server keeps the last 1,000 cells of the kernel's life and numbers them in the order it took them; a reply holds at most `limit` of them (1 to 1,000, default 1,000) and at most 2 MiB of cells (every cell of a kernel on 8 GPUs fits; at least 32 of the largest records do). Without `since`: the newest cells that fit. With `since` (the `cursor` of an earlier reply, or 0 for the oldest): the cells taken after it, oldest first; while `more` is true, ask again with `since` set to this reply's `cursor`. 400 for a `since` or `limit` that is not a whole number in range, 404 for a kernel this server does not run.
 */
export interface CellsReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  kernel_id: string;
  /**
   * The notebook (or file) of the kernel's session; null without a session.
   */
  path: string | null;
  /**
   * Why the kernel's latest timeline file was not taken (not loaded, refused, malformed, another process's), for people; null when it was. Cells read earlier are kept either way.
   */
  reason: string | null;
  /**
   * Where this reply ends: the number of its last cell (with no cell: of the newest cell the server took, 0 before the first). Pass it as `since` to get only the cells taken after it.
   */
  cursor: number;
  /**
   * Cells after `cursor` were left out of this reply (by `limit` or its size): ask again with `since` set to `cursor`. Always false without `since`.
   */
  more: boolean;
  /**
   * @maxItems 1000
   */
  cells: Cell[];
  /**
   * Of every cell the server keeps for the kernel (not only this reply's), those that left the most memory allocated as they ended (summed over their GPUs), largest first, at most 5. A later cell may have freed some of it: this is what each added, the best the allocator's totals tell without tracing.
   */
  most_left: RankedCell[];
  /**
   * Of every cell the server keeps for the kernel, those with the highest exact peaks on any GPU, highest first, at most 5.
   */
  highest_peaks: RankedCell[];
}
export interface Cell {
  /**
   * Order of the cell among those its kernel process ran, from 0.
   */
  seq: number;
  /**
   * The kernel process that ran it (a restarted kernel has a new one).
   */
  pid: number;
  /**
   * The cell's number, In [n]; null for a cell run without one.
   */
  execution_count: number | null;
  /**
   * JupyterLab's cell id, from the execute request's metadata; null when the front end sent none.
   */
  cell_id: string | null;
  /**
   * When the cell started (unix seconds).
   */
  start: number;
  /**
   * When it ended (unix seconds).
   */
  end: number;
  wall_seconds: number;
  outcome: CellOutcome;
  /**
   * Each CUDA device the kernel's allocator uses; empty for a cell run while CUDA was not initialised.
   *
   * @maxItems 64
   */
  gpus: CellGpu[];
  /**
   * For a %%ddp or %%ddp_launch cell, what each rank's own allocator did in it (the ranks measure themselves; NVML figures are not read there, so process_change_bytes is null); empty for other cells. A cell holds at most 128 GPU entries in all, its own `gpus` and its ranks' together.
   *
   * @maxItems 64
   */
  ranks: RankFigures[];
}
/**
 * One CUDA device: PyTorch's allocator as the cell ended, and what changed while it ran.
 */
export interface CellGpu {
  /**
   * CUDA device index in the kernel.
   */
  index: number;
  /**
   * NVML's UUID of the GPU ('GPU-…') or MIG device ('MIG-…'); null if NVML could not read it.
   */
  uuid: string | null;
  /**
   * Allocated in live tensors as the cell ended.
   */
  allocated_bytes: number;
  /**
   * Allocated at the end minus at the start: what the cell left behind (negative: it freed memory).
   */
  allocated_change_bytes: number;
  /**
   * The cell's peak allocated bytes, when the cell raised the kernel's peak; null when it stayed below an earlier peak (see peak_at_most_bytes). PyTorch's peak statistics are never reset.
   */
  peak_allocated_bytes: number | null;
  /**
   * When peak_allocated_bytes is null: the cell's peak was at most this, the kernel's earlier peak. Null otherwise.
   */
  peak_at_most_bytes: number | null;
  /**
   * Change in memory the allocator reserves (cached), allocated or not.
   */
  reserved_change_bytes: number;
  /**
   * Change in the process's device memory as NVML counts it (the CUDA context, cuBLAS and NCCL workspaces the allocator does not); null when NVML cannot tell.
   */
  process_change_bytes: number | null;
}
export interface RankFigures {
  rank: number;
  /**
   * Empty for a rank on the CPU.
   *
   * @maxItems 64
   */
  gpus: CellGpu[];
}
/**
 * A cell the server keeps for the kernel, named by its `pid` and `seq` (in `cells` when this reply holds it), and its figure.
 */
export interface RankedCell {
  pid: number;
  seq: number;
  bytes: number;
}
/**
 * POST {base_url}api/gpu/kernels/<kernel_id>/free-cache: what the kernel's `jupyter_gpu.free_cache` comm target answered after torch.cuda.empty_cache(), which it calls only when PyTorch has already initialised CUDA. Not an NVML reply: no `state`.
 */
export interface FreeCacheReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  kernel_id: string;
  /**
   * Whether PyTorch had initialised CUDA in the kernel (false: nothing was cached, nothing done).
   */
  cuda_in_use: boolean;
  /**
   * Memory PyTorch's caching allocator gave back to the driver, over all devices.
   */
  freed_bytes: number;
  devices: Device1[];
  /**
   * Why nothing was freed, for people; null when empty_cache() ran.
   */
  reason: string | null;
}
export interface Device1 {
  /**
   * The CUDA index in the kernel (cuda:N).
   */
  index: number;
  /**
   * torch.cuda.memory_reserved() before.
   */
  reserved_before_bytes: number;
  /**
   * torch.cuda.memory_reserved() after: what live tensors' segments still hold.
   */
  reserved_after_bytes: number;
  /**
   * In live tensors: not freed, and not freeable without deleting them.
   */
  allocated_bytes: number;
}
/**
 * GET {base_url}api/gpu/host: what the server's container allows it and its kernels (its cgroups, v1 or v2: the tightest limit on the way up), how much room /dev/shm has (DataLoader workers pass batches through it), and each kernel's resident memory. Read from /proc and /sys/fs/cgroup, not NVML; a part that cannot be read is null, with the reason in `unavailable`.
 */
export interface HostReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  /**
   * When it was read (Unix seconds).
   */
  time: number;
  /**
   * 1 or 2, as the memory controller is mounted; null when no memory cgroup is readable.
   */
  cgroup_version: 1 | 2 | null;
  memory: HostMemory;
  cpu: HostCpu;
  pids: HostPids;
  shm: HostShm;
  kernels: KernelHostMemory[];
  /**
   * Part ('memory', 'cpu', 'pids', 'shm') → why it is null, for people.
   */
  unavailable: {
    [k: string]: string;
  };
}
export interface HostMemory {
  /**
   * The container's memory limit; null when there is none (or it cannot be read).
   */
  limit_bytes: number | null;
  /**
   * What the server's memory cgroup uses now (page cache included, as the limit counts it).
   */
  usage_bytes: number | null;
  /**
   * Processes the out-of-memory killer has ended in the server's memory cgroup since it was made.
   */
  oom_kills: number | null;
}
export interface HostCpu {
  /**
   * CPUs' worth of time the cgroup allows (cpu.max, or cfs_quota_us over cfs_period_us); null without a quota.
   */
  quota: number | null;
  /**
   * CPUs the server may run on (its affinity).
   */
  available: number;
}
export interface HostPids {
  /**
   * Processes and threads the cgroup allows; null without a limit.
   */
  limit: number | null;
  current: number | null;
}
export interface HostShm {
  /**
   * Size of /dev/shm (Docker's default is 64 MiB).
   */
  size_bytes: number | null;
  free_bytes: number | null;
}
export interface KernelHostMemory {
  id: string;
  pid: number | null;
  /**
   * The kernel process's resident memory (its DataLoader workers not included); null when it cannot be read.
   */
  rss_bytes: number | null;
}
/**
 * GET {base_url}api/gpu/exits: the kernels of this server that died without being asked to (the restarter saw them go), newest last, at most 100. A kernel shut down or restarted on request is never listed.
 */
export interface ExitsReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  /**
   * @maxItems 100
   */
  exits: KernelExit[];
}
export interface KernelExit {
  kernel_id: string;
  /**
   * The notebook of the kernel's session; null without one.
   */
  path: string | null;
  /**
   * The process that died.
   */
  pid: number | null;
  /**
   * When the server saw it gone (Unix seconds).
   */
  time: number;
  cause: ExitCause;
  /**
   * A sentence with the figures, for people.
   */
  detail: string;
  /**
   * Execution count of the cell that was running, when the kernel had said so; null otherwise.
   */
  last_cell: number | null;
}
/**
 * POST {base_url}api/gpu/notices/server-stop with the JSON body {"stop_in_seconds": 0 to 86400, "reason": a string (cut at 300 characters), "by": a string of 1 to 100 characters}: the notice as the server passed it to the open JupyterLab tabs (the event events/server_stop.json). Sent by the Hub's idle-server culler before it stops the server; the request is not user activity. Not an NVML reply: no `state`.
 */
export interface ServerStopNoticeReply {
  /**
   * Version of these schemas. It changes when a reply changes in a way an existing client could misread.
   */
  version: 1;
  /**
   * Seconds from the notice to the stop.
   */
  stop_in_seconds: number;
  /**
   * Why, as the notice said it, cut at 300 characters.
   */
  reason: string;
  /**
   * Who stops the server.
   */
  by: string;
  /**
   * The sentence the notification and the server log carry.
   */
  message: string;
}
