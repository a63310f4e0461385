/**
 * The GPU Dashboard: a main-area widget (dragged, split and tabbed like any
 * JupyterLab panel) with larger charts for every GPU side by side, and a
 * window selector; a MIG device has its own memory chart after its GPU's
 * charts. It draws from GpuModel's one telemetry poll, which runs
 * while it is on screen; the memory charts mark the cells of the notebooks
 * they show, whose timelines it asks for every few polls (kernelCells.ts).
 */
import * as React from 'react';

import { gpmView, GpmView, MEANING } from './activity';
import { LaunchBoundHint, NotCharted } from './activityViews';
import { formatAge } from './format';
import {
  ActivityChart,
  ClockChart,
  MemoryChart,
  LinkChart,
  PowerChart,
  TemperatureChart,
  UtilisationChart
} from './gpuCharts';
import { KernelCells } from './kernelCells';
import { GpuModel, MAX_WINDOW_SECONDS } from './model';
import { OnScreenRenderer } from './onScreen';
import { viewRange, windowCut } from './series';
import { deviceFor, deviceLabel, migDevicesOf } from './shape';
import type { GpuSample, TelemetryReply } from './types';

/** The windows offered, in seconds: 1, 5, 10 and 60 minutes. */
export const WINDOWS = [60, 300, 600, MAX_WINDOW_SECONDS];
const HEIGHT = 150;

export class GpuDashboard extends OnScreenRenderer<GpuModel> {
  constructor(model: GpuModel) {
    super(model);
    this.addClass('jp-gpu-dashboard');
    this._cells = new KernelCells(model.cellsIfKernel, () => this.update());
    model.stateChanged.connect(this._polled, this);
  }

  protected showing(visible: boolean): void {
    this._onScreen = visible;
    this.model.setDashboardVisible(visible);
  }

  /** Each new telemetry reply while on screen is a poll for the cells' timelines. */
  private _polled(): void {
    const reply = this.model.telemetry;
    if (this._onScreen && this.model.polled && reply !== this._lastReply) {
      this._lastReply = reply;
      this._cells.poll();
    }
  }

  render(): JSX.Element {
    const m = this.model;
    const t = m.telemetry;
    const choose = (seconds: number) => {
      this._window = seconds;
      this.update();
    };
    return (
      <div className="jp-gpu-dashboard-content">
        <div className="jp-gpu-header">
          <h2 className="jp-gpu-title">GPU Dashboard</h2>
          {m.simulated && (
            <span
              className="jp-gpu-badge jp-gpu-simulated"
              title="These readings are replayed from a recording by the simulated backend; they are not this machine's GPUs."
            >
              simulated
            </span>
          )}
          <div
            className="jp-gpu-window"
            role="radiogroup"
            aria-label="Time window"
          >
            {WINDOWS.map(w => (
              <button
                key={w}
                role="radio"
                aria-checked={w === this._window}
                data-window={w}
                className={`jp-gpu-window-choice${w === this._window ? ' jp-mod-active' : ''}`}
                onClick={() => choose(w)}
              >
                {formatAge(w)}
              </button>
            ))}
          </div>
        </div>
        {m.error && (
          <div className="jp-gpu-error" role="alert">
            {m.error}
          </div>
        )}
        {!m.polled && !m.error && (
          <div className="jp-gpu-loading">Loading GPU figures…</div>
        )}
        {m.polled && m.available === false && (
          <div className="jp-gpu-nogpu" data-state="no-gpu">
            {m.reason ?? 'The server reports no usable GPU.'}
          </div>
        )}
        {m.polled &&
          m.available &&
          t &&
          this._gpus(t.now, t.interval, t.owners)}
      </div>
    );
  }

  private _gpus(
    now: number,
    interval: number,
    owners: Parameters<typeof MemoryChart>[0]['owners']
  ): JSX.Element {
    const m = this.model;
    const range = viewRange(m.history, now, this._window);
    const history = windowCut(m.history, range[0]);
    const span = `over ${formatAge(range[1] - range[0])}`;
    return (
      <div className="jp-gpu-dashboard-gpus">
        {m.gpus.map(g => {
          const device = deviceFor(m.devices?.devices ?? [], g);
          const props = {
            history,
            gpu: g,
            range,
            maxGap: Math.max(3 * (interval || 1), 5),
            units: m.settings.memoryUnits,
            height: HEIGHT,
            span
          };
          return (
            <section
              key={g.uuid ?? g.index}
              className={`jp-gpu-dashboard-gpu${g.mig ? ' jp-gpu-dashboard-mig' : ''}`}
              data-gpu-index={g.index}
            >
              <h3 data-field="label">
                {deviceLabel(g)} · {device?.name ?? 'GPU'}
                {g.state !== 'ok' && (
                  <span className="jp-gpu-error" data-field="state">
                    {' '}
                    {g.error || 'GPU lost'}
                  </span>
                )}
              </h3>
              {!g.mig && (
                <>
                  <Panel title="Utilisation" hover={MEANING.utilisation}>
                    <UtilisationChart {...props} withMemoryBusy />
                  </Panel>
                  <GpmPanel
                    title="Really busy"
                    hover={`${MEANING.smActive}\n${MEANING.tensorActive}`}
                    view={gpmView(g, 'sm_active_percent')}
                  >
                    <ActivityChart {...props} />
                    <LaunchBoundHint history={history} gpu={g} />
                  </GpmPanel>
                </>
              )}
              <Panel
                title={
                  g.mig
                    ? 'Memory by notebook'
                    : memoryTitle(g, m.telemetry?.latest?.gpus ?? [])
                }
              >
                <MemoryChart
                  {...props}
                  owners={owners}
                  cellsOf={this._cells.of}
                  total={
                    g.memory_total_bytes ?? device?.memory_total_bytes ?? null
                  }
                />
              </Panel>
              {!g.mig && (
                <>
                  <Panel title="Power against limit">
                    <PowerChart {...props} />
                  </Panel>
                  <Panel title="Temperature">
                    <TemperatureChart {...props} />
                  </Panel>
                  <Panel title="SM clock">
                    <ClockChart {...props} />
                  </Panel>
                  <Panel title="PCIe" hover={MEANING.pcie}>
                    <LinkChart {...props} link="pcie" />
                  </Panel>
                  <GpmPanel
                    title="NVLink"
                    hover={MEANING.nvlink}
                    view={gpmView(g, 'nvlink_rx_bytes_per_second')}
                  >
                    <LinkChart {...props} link="nvlink" />
                  </GpmPanel>
                </>
              )}
            </section>
          );
        })}
      </div>
    );
  }

  private _window = 600;
  private _cells: KernelCells;
  private _onScreen = false;
  private _lastReply: TelemetryReply | null = null;
}

/** A GPU in MIG mode's memory is stacked by its MIG devices (series.ts). */
function memoryTitle(g: GpuSample, gpus: GpuSample[]): string {
  return migDevicesOf(gpus, g).length
    ? 'Memory by MIG device'
    : 'Memory by notebook';
}

function Panel(props: {
  title: string;
  /** What the chart shows, in a sentence or two: the title's hover. */
  hover?: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <div className="jp-gpu-dashboard-chart">
      <div className="jp-gpu-chart-label" title={props.hover}>
        {props.title}
      </div>
      {props.children}
    </div>
  );
}

/** A chart of GPM figures, or why the GPU has none; nothing from servers before GPM. */
function GpmPanel(props: {
  title: string;
  hover: string;
  view: GpmView;
  children: React.ReactNode;
}): JSX.Element | null {
  const { view } = props;
  if (view === 'none') {
    return null;
  }
  return (
    <Panel title={props.title} hover={props.hover}>
      {view === 'chart' ? props.children : <NotCharted reason={view.reason} />}
    </Panel>
  );
}
