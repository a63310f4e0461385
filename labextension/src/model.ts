/**
 * The state shared by the GPU panel, the GPU Dashboard and the status-bar
 * item, and the polls that keep it fresh.
 *
 * One telemetry poll feeds every view: it asks only for samples newer than the
 * last one it holds (`?since=`), stands by while the browser tab is hidden, and
 * while none of the panel, the dashboard and the status-bar item is shown. The kernels poll
 * ("who holds GPU memory", and what idle kernels hold for the status bar)
 * runs only while the panel or the status-bar item is visible. Both back off
 * when the server is unreachable and recover by themselves.
 */
import { KernelAPI, ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import { BackoffPoll } from './backoffPoll';
import { idleHeldBytes, KernelAction } from './idle';
import {
  requestAPI,
  requestCells,
  requestFreeCache,
  ServerExtensionMissing
} from './request';
import { DEFAULT_SETTINGS } from './settings';
import { busiestGpu, fillProcesses, mergeHistory, selectGpus } from './shape';
import type { IGpuModel, IGpuSettings } from './tokens';
import type {
  CellsReply,
  DevicesReply,
  FreeCacheReply,
  GpuSample,
  HostReply,
  KernelsReply,
  NvmlState,
  Sample,
  TelemetryReply
} from './types';

/** The widest window the dashboard offers (60 min): the browser keeps that much history. */
export const MAX_WINDOW_SECONDS = 3600;

/** The longest wait between attempts while the server cannot be reached. */
const MAX_BACKOFF_MS = 30 * 1000;

export class GpuModel implements IGpuModel {
  /** Emitted when any figure, the error or the settings change. */
  readonly stateChanged = new Signal<this, void>(this);

  constructor(serverSettings: ServerConnection.ISettings) {
    this._serverSettings = serverSettings;
    this._telemetryPoll = new BackoffPoll({
      auto: false,
      factory: () => this._fetchTelemetry(),
      frequency: this._frequency(this._settings.refreshInterval),
      name: 'jupyter-gpu:telemetry',
      standby: () =>
        this._panelVisible || this._statusBarVisible || this._dashboardVisible
          ? 'when-hidden'
          : true
    });
    this._kernelsPoll = new BackoffPoll({
      auto: false,
      factory: () => this._fetchKernels(),
      frequency: this._frequency(this._settings.kernelsInterval),
      name: 'jupyter-gpu:kernels',
      // the status bar shows what idle kernels hold, so it needs the kernels too
      standby: () =>
        this._panelVisible || this._statusBarVisible ? 'when-hidden' : true
    });
  }

  /**
   * Show the telemetry the page came with (pageTelemetry.ts) until the first
   * poll answers; that poll still asks for the whole history, for the charts.
   * A reply the model already has from a poll is newer: then this does nothing.
   * The views drawn from the history wait for that poll (`polled`).
   */
  seed(reply: TelemetryReply): void {
    if (this._telemetry !== null) {
      return;
    }
    this._telemetry = reply;
    this.stateChanged.emit();
  }

  /** Begin polling. */
  start(): void {
    void this._telemetryPoll.start();
    void this._kernelsPoll.start();
  }

  get settings(): IGpuSettings {
    return this._settings;
  }

  set settings(value: IGpuSettings) {
    this._settings = { ...DEFAULT_SETTINGS, ...value };
    this._telemetryPoll.frequency = this._frequency(
      this._settings.refreshInterval
    );
    this._kernelsPoll.frequency = this._frequency(
      this._settings.kernelsInterval
    );
    this._history = mergeHistory(this._history, [], this._keepSeconds());
    this.stateChanged.emit();
  }

  /** Tell the model whether the panel is on screen. */
  setPanelVisible(visible: boolean): void {
    if (this._panelVisible === visible) {
      return;
    }
    this._panelVisible = visible;
    if (visible) {
      void this._telemetryPoll.refresh();
      void this._kernelsPoll.refresh();
    }
  }

  /** Tell the model whether the dashboard is on screen (it shares the telemetry poll). */
  setDashboardVisible(visible: boolean): void {
    if (this._dashboardVisible === visible) {
      return;
    }
    this._dashboardVisible = visible;
    if (visible) {
      void this._telemetryPoll.refresh();
    }
  }

  /** Tell the model whether the status-bar item is on screen. */
  setStatusBarVisible(visible: boolean): void {
    if (this._statusBarVisible === visible) {
      return;
    }
    this._statusBarVisible = visible;
    if (visible) {
      void this._telemetryPoll.refresh();
      void this._kernelsPoll.refresh();
    }
  }

  /** Ask for fresh figures now. */
  refresh(): void {
    void this._telemetryPoll.refresh();
    if (this._panelVisible) {
      void this._kernelsPoll.refresh();
    }
  }

  /** True once there are figures: the page's (seed) or the first telemetry reply. */
  get loaded(): boolean {
    return this._telemetry !== null;
  }

  /** True once a telemetry reply has arrived, and with it the history. */
  get polled(): boolean {
    return this._polled;
  }

  /** Whether the server has a usable GPU; null while unknown. */
  get available(): boolean | null {
    return this._telemetry ? this._telemetry.state === 'ok' : null;
  }

  /** The server's explanation when no GPU is usable. */
  get reason(): string | null {
    return this._telemetry?.reason ?? this._devices?.reason ?? null;
  }

  /** Readings come from the simulated backend, not a real GPU. */
  get simulated(): boolean {
    return !!(this._telemetry?.simulated || this._devices?.simulated);
  }

  get devices(): DevicesReply | null {
    return this._devices;
  }

  get telemetry(): TelemetryReply | null {
    return this._telemetry;
  }

  get host(): HostReply | null {
    return this._host;
  }

  get kernels(): KernelsReply | null {
    return this._kernels;
  }

  /** The browser's copy of the server's history, oldest first. */
  get history(): Sample[] {
    return this._history;
  }

  /** The latest sample's GPUs, restricted to the GPUs selected in the settings. */
  get gpus(): GpuSample[] {
    const latest = this._telemetry?.latest;
    return latest ? selectGpus(latest.gpus, this._settings.gpus) : [];
  }

  /** The busiest selected GPU, for the status bar. */
  get busiest(): GpuSample | null {
    return busiestGpu(this.gpus);
  }

  /** GPU memory held by kernels the server flags as idle holders. */
  get idleHeld(): number {
    return idleHeldBytes(this._kernels);
  }

  /**
   * Act on a kernel of this server: free cache through jupyter_gpu's route,
   * the others through jupyter_server's own kernel API (so its authorization
   * applies). Resolves with the free-cache reply, or null for the others.
   */
  readonly act = async (
    kernelId: string,
    action: KernelAction
  ): Promise<FreeCacheReply | null> => {
    const s = this._serverSettings;
    let freed: FreeCacheReply | null = null;
    try {
      if (action === 'free-cache') {
        freed = await requestFreeCache(kernelId, s);
      } else if (action === 'interrupt') {
        await KernelAPI.interruptKernel(kernelId, s);
      } else if (action === 'restart') {
        await KernelAPI.restartKernel(kernelId, s);
      } else {
        await KernelAPI.shutdownKernel(kernelId, s);
      }
    } finally {
      void this._kernelsPoll.refresh();
    }
    return freed;
  };

  /** One kernel's per-cell timeline; a stable function, so views may keep it. */
  readonly cells = (kernelId: string): Promise<CellsReply> =>
    requestCells(kernelId, this._serverSettings);

  /**
   * The same, or null when the server has no such kernel: one shut down since
   * (the server forgets its cells), whose memory the history still shows.
   */
  readonly cellsIfKernel = (kernelId: string): Promise<CellsReply | null> =>
    this.cells(kernelId).catch(error => {
      if (
        error instanceof ServerConnection.ResponseError &&
        error.response.status === 404
      ) {
        return null;
      }
      throw error;
    });

  /** The last request error, or null while the server answers. */
  get error(): string | null {
    return this._error;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._telemetryPoll.dispose();
    this._kernelsPoll.dispose();
    Signal.clearData(this);
  }

  /** History kept: what the panel draws, and at least the dashboard's widest window. */
  private _keepSeconds(): number {
    return Math.max(this._settings.historySeconds, MAX_WINDOW_SECONDS);
  }

  private _frequency(seconds: number) {
    const interval = Math.max(250, Math.round(seconds * 1000));
    return { interval, backoff: true, max: Math.max(interval, MAX_BACKOFF_MS) };
  }

  private async _fetchTelemetry(): Promise<void> {
    try {
      const reply = await requestAPI(
        'telemetry',
        this._serverSettings,
        this._lastT === null ? {} : { since: this._lastT }
      );
      this._history = mergeHistory(
        this._history,
        fillProcesses(reply.history),
        this._keepSeconds()
      );
      const last = this._history[this._history.length - 1];
      this._lastT = last ? last.t : this._lastT;
      const lastState = this._telemetry?.state;
      this._telemetry = reply;
      this._polled = true;
      this._error = null;
      if (this._needDevices(reply, lastState)) {
        this._devices = await requestAPI('devices', this._serverSettings);
      }
      this.stateChanged.emit();
    } catch (error) {
      this._fail(error);
      throw error;
    }
  }

  private async _fetchKernels(): Promise<void> {
    try {
      // the container's limits ride with the kernels (the panel shows both); a server
      // without the route (an older jupyter_gpu) leaves them out, not the kernels
      const [kernels, host] = await Promise.all([
        requestAPI('kernels', this._serverSettings),
        requestAPI('host', this._serverSettings).catch(() => null)
      ]);
      this._kernels = kernels;
      this._host = host;
      this.stateChanged.emit();
    } catch (error) {
      this._fail(error);
      throw error;
    }
  }

  /** Devices are fetched once, and again when NVML's state or the set of GPUs changes. */
  private _needDevices(
    reply: TelemetryReply,
    lastState: NvmlState | undefined
  ): boolean {
    if (this._devices === null || lastState !== reply.state) {
      return true;
    }
    const known = new Set(this._devices.devices.map(d => d.uuid));
    const seen = reply.latest?.gpus ?? [];
    return seen.some(g => !known.has(g.uuid));
  }

  private _fail(error: unknown): void {
    if (error instanceof ServerExtensionMissing) {
      this._error = error.message;
    } else if (error instanceof ServerConnection.NetworkError) {
      this._error = 'Cannot reach the Jupyter server; retrying.';
    } else if (error instanceof ServerConnection.ResponseError) {
      this._error = `The server answered ${error.response.status}: ${error.message}`;
    } else {
      this._error = String(error);
    }
    this.stateChanged.emit();
  }

  private _serverSettings: ServerConnection.ISettings;
  private _settings: IGpuSettings = { ...DEFAULT_SETTINGS };
  private _telemetryPoll: BackoffPoll;
  private _kernelsPoll: BackoffPoll;
  private _panelVisible = false;
  private _statusBarVisible = false;
  private _dashboardVisible = false;
  private _telemetry: TelemetryReply | null = null;
  private _polled = false;
  private _devices: DevicesReply | null = null;
  private _kernels: KernelsReply | null = null;
  private _host: HostReply | null = null;
  private _history: Sample[] = [];
  private _lastT: number | null = null;
  private _error: string | null = null;
  private _isDisposed = false;
}
