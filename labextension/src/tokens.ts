/**
 * What other JupyterLab plugins may use of jupyter-gpu: the shared GPU model,
 * so that they read the one poll of the server instead of starting their own.
 */
import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { MemoryUnits } from './format';
import type { KernelAction } from './idle';
import type {
  CellsReply,
  DevicesReply,
  FreeCacheReply,
  GpuSample,
  HostReply,
  KernelsReply,
  Sample,
  TelemetryReply
} from './types';

/** The user's settings of the `jupyter-gpu:plugin` schema. */
export interface IGpuSettings {
  /** Seconds between telemetry requests. */
  refreshInterval: number;
  /** Seconds between "who holds GPU memory" requests while the panel is open. */
  kernelsInterval: number;
  /** GPU indices to show; empty shows every GPU. */
  gpus: number[];
  memoryUnits: MemoryUnits;
  /** Seconds of history drawn in the charts. */
  historySeconds: number;
  showStatusBar: boolean;
}

/**
 * The figures of the server's GPUs and its kernels' GPU memory, as the GPU
 * panel, the dashboard and the status-bar item show them. The figures stay
 * fresh while one of those views is on screen (the status-bar item is, by
 * default); `stateChanged` fires on every reply and every error. It lives as
 * long as the application: a plugin reads it, never disposes it.
 */
export interface IGpuModel {
  /** Emitted when any figure, the error or the settings change. */
  readonly stateChanged: ISignal<IGpuModel, void>;
  readonly settings: IGpuSettings;
  /** True once the first telemetry reply has arrived. */
  readonly loaded: boolean;
  /** Whether the server has a usable GPU; null while unknown. */
  readonly available: boolean | null;
  /** The server's explanation when no GPU is usable. */
  readonly reason: string | null;
  /** Readings come from the simulated backend, not a real GPU. */
  readonly simulated: boolean;
  readonly devices: DevicesReply | null;
  readonly telemetry: TelemetryReply | null;
  readonly kernels: KernelsReply | null;
  /** The container's limits (memory, /dev/shm) and the kernels' resident memory; null until read. */
  readonly host: HostReply | null;
  /** The browser's copy of the server's history, oldest first. */
  readonly history: Sample[];
  /** The latest sample's GPUs, restricted to the GPUs selected in the settings. */
  readonly gpus: GpuSample[];
  /** The busiest selected GPU. */
  readonly busiest: GpuSample | null;
  /** GPU memory held by kernels the server flags as idle holders. */
  readonly idleHeld: number;
  /** The last request error, or null while the server answers. */
  readonly error: string | null;
  /** Ask for fresh figures now. */
  refresh(): void;
  /**
   * Act on a kernel of this server (free its cache, interrupt, restart, shut
   * down); resolves with the free-cache reply, or null for the others.
   */
  act(kernelId: string, action: KernelAction): Promise<FreeCacheReply | null>;
  /** One kernel's per-cell timeline. */
  cells(kernelId: string): Promise<CellsReply>;
}

/** The token of the shared GPU model, provided by `jupyter-gpu:plugin`. */
export const IGpuModel = new Token<IGpuModel>(
  'jupyter-gpu:IGpuModel',
  "The GPU figures of jupyter_gpu's server extension, polled once for every view."
);
