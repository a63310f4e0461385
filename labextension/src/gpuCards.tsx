/**
 * The panel's GPU cards: for each selected GPU, its utilisation, activity
 * (SM and tensor cores, with a hint when it is busy but its SMs mostly idle)
 * and memory charts over the panel's window and its other readings, each
 * reading NVML could not give marked "not supported" with the reason. A MIG device has a
 * card of its own after its GPU's, with its memory and who holds it; what
 * belongs to the whole GPU (utilisation, temperature, power, clocks, PCIe) is
 * on the GPU's card only.
 */
import * as React from 'react';

import { gpmView, MEANING } from './activity';
import { LaunchBoundHint, NotCharted } from './activityViews';
import {
  formatAge,
  formatBytes,
  formatBytesOf,
  formatCelsius,
  formatMHz,
  formatPercent,
  formatPower,
  formatRate,
  MemoryUnits
} from './format';
import { ActivityChart, MemoryChart, UtilisationChart } from './gpuCharts';
import { GpuModel } from './model';
import { viewRange, windowCut } from './series';
import { deviceFor, deviceLabel } from './shape';
import type {
  Device,
  GpuSample,
  MigDevice,
  ProcessOwner,
  Sample
} from './types';

export function Cards(props: { model: GpuModel }): JSX.Element {
  const m = props.model;
  const t = m.telemetry;
  const gpus = m.gpus;
  if (!t || gpus.length === 0) {
    return (
      <div className="jp-gpu-empty">No GPU selected (see the settings).</div>
    );
  }
  const range = viewRange(m.history, t.now, m.settings.historySeconds);
  const history = windowCut(m.history, range[0]);
  const maxGap = Math.max(3 * (t.interval || 1), 5);
  return (
    <div className="jp-gpu-cards">
      {gpus.map(g => (
        <Card
          key={g.index}
          gpu={g}
          device={deviceFor(m.devices?.devices ?? [], g)}
          history={history}
          owners={t.owners}
          range={range}
          maxGap={maxGap}
          units={m.settings.memoryUnits}
        />
      ))}
    </div>
  );
}

/** Pixels: room for the axes and a readable line in a sidebar-wide card. */
const CARD_CHART_HEIGHT = 110;

interface ICardProps {
  gpu: GpuSample;
  device: Device | undefined;
  history: Sample[];
  owners: ProcessOwner[];
  range: [number, number];
  maxGap: number;
  units: MemoryUnits;
}

function Card(props: ICardProps): JSX.Element {
  const { gpu: g, device, units } = props;
  const name = device?.name ?? 'GPU';
  const charts = {
    history: props.history,
    gpu: g,
    range: props.range,
    maxGap: props.maxGap,
    units,
    height: CARD_CHART_HEIGHT,
    span: `over ${formatAge(props.range[1] - props.range[0])}`
  };
  const total = g.memory_total_bytes ?? device?.memory_total_bytes ?? 0;
  const memory = (
    <div className="jp-gpu-chart">
      <div className="jp-gpu-chart-label">
        <span>Memory</span>
        <Value gpu={g} field="memory_used_bytes">
          {formatBytesOf(g.memory_used_bytes, total || null, units)}
        </Value>
      </div>
      <MemoryChart {...charts} owners={props.owners} total={total || null} />
    </div>
  );
  return (
    <section
      className={`jp-gpu-card jp-gpu-state-${g.state}${g.mig ? ' jp-gpu-card-mig' : ''}`}
      data-gpu-index={g.index}
      data-gpu-uuid={g.uuid}
    >
      <div className="jp-gpu-card-title">
        <span className="jp-gpu-index" data-field="label">
          {deviceLabel(g)}
        </span>
        {g.mig ? (
          <Instance mig={g.mig} name={name} uuid={g.uuid} />
        ) : (
          <span className="jp-gpu-name" title={device?.pci_bus_id ?? undefined}>
            {name}
          </span>
        )}
        <Mig device={device} />
      </div>
      {g.state !== 'ok' && (
        <div className="jp-gpu-error" role="alert" data-field="state">
          {g.error || 'GPU lost'}
        </div>
      )}
      {g.mig ? (
        <MigBody gpu={g} mig={g.mig} memory={memory} units={units} />
      ) : (
        <WholeGpuBody {...props} charts={charts} memory={memory} />
      )}
    </section>
  );
}

/** A MIG device's card: its memory and who holds it; the rest is its GPU's. */
function MigBody(props: {
  gpu: GpuSample;
  mig: MigDevice;
  memory: JSX.Element;
  units: MemoryUnits;
}): JSX.Element {
  const g = props.gpu;
  return (
    <>
      {props.memory}
      <dl className="jp-gpu-readings">
        <Reading gpu={g} field="memory_reserved_bytes" label="Driver reserved">
          {formatBytes(g.memory_reserved_bytes, props.units)}
        </Reading>
      </dl>
      <div
        className="jp-gpu-hint"
        data-field="gpu-wide"
        title={g.unsupported?.temperature_celsius}
      >
        Utilisation, temperature, power, clocks and PCIe are the whole
        GPU&apos;s: see GPU {props.mig.parent_index}.
      </div>
    </>
  );
}

/** Where a MIG device sits, its UUID and NVML's name on hover. */
function Instance(props: {
  mig: MigDevice;
  name: string;
  uuid: string | null;
}): JSX.Element {
  const { gpu_instance_id: gi, compute_instance_id: ci } = props.mig;
  return (
    <span
      className="jp-gpu-name"
      data-field="mig-instance"
      title={`${props.name}${props.uuid ? ` (${props.uuid})` : ''}`}
    >
      GI {gi ?? '?'} · CI {ci ?? '?'}
    </span>
  );
}

/** A whole GPU's card: utilisation, memory and every other reading. */
function WholeGpuBody(
  props: ICardProps & {
    charts: Parameters<typeof UtilisationChart>[0];
    memory: JSX.Element;
  }
): JSX.Element {
  const { gpu: g, device, units, charts } = props;
  return (
    <>
      <div className="jp-gpu-chart">
        <div className="jp-gpu-chart-label">
          <span title={MEANING.utilisation}>Utilisation</span>
          <Value gpu={g} field="utilization_gpu_percent">
            {formatPercent(g.utilization_gpu_percent)}
          </Value>
        </div>
        <UtilisationChart {...charts} />
      </div>
      <ReallyBusy gpu={g} charts={charts} />
      {props.memory}
      <dl className="jp-gpu-readings">
        <Reading gpu={g} field="temperature_celsius" label="Temperature">
          {formatCelsius(g.temperature_celsius)}
        </Reading>
        <Reading gpu={g} field="power_watts" label="Power">
          {formatPower(
            g.power_watts,
            g.power_limit_watts ?? device?.power_limit_watts
          )}
        </Reading>
        <Reading gpu={g} field="clock_sm_mhz" label="SM clock">
          {formatMHz(g.clock_sm_mhz)}
        </Reading>
        <Reading gpu={g} field="clock_mem_mhz" label="Memory clock">
          {formatMHz(g.clock_mem_mhz)}
        </Reading>
        <Reading gpu={g} field="pcie_rx_bytes_per_second" label="PCIe rx">
          {formatRate(g.pcie_rx_bytes_per_second, units)}
        </Reading>
        <Reading gpu={g} field="pcie_tx_bytes_per_second" label="PCIe tx">
          {formatRate(g.pcie_tx_bytes_per_second, units)}
        </Reading>
        <Reading gpu={g} field="fan_speed_percent" label="Fan">
          {formatPercent(g.fan_speed_percent)}
        </Reading>
        <Reading gpu={g} field="memory_reserved_bytes" label="Driver reserved">
          {formatBytes(g.memory_reserved_bytes, units)}
        </Reading>
        <Reading gpu={g} field="utilization_memory_percent" label="Memory busy">
          {formatPercent(g.utilization_memory_percent)}
        </Reading>
      </dl>
    </>
  );
}

/**
 * What the GPU really did beside its utilisation: SM and tensor-core
 * activity, or why the GPU cannot tell (nothing from servers before GPM).
 */
function ReallyBusy(props: {
  gpu: GpuSample;
  charts: Parameters<typeof ActivityChart>[0];
}): JSX.Element | null {
  const { gpu: g, charts } = props;
  const view = gpmView(g, 'sm_active_percent');
  if (view === 'none') {
    return null;
  }
  return (
    <div className="jp-gpu-chart" data-field="really-busy">
      <div className="jp-gpu-chart-label">
        <span title={`${MEANING.smActive}\n${MEANING.tensorActive}`}>
          Really busy
        </span>
        {view === 'chart' && (
          <span className="jp-gpu-value" data-field="sm_active_percent">
            SM {formatPercent(g.sm_active_percent, 'fine')} · tensor{' '}
            {formatPercent(g.tensor_active_percent, 'fine')}
          </span>
        )}
      </div>
      {view === 'chart' ? (
        <ActivityChart {...charts} />
      ) : (
        <NotCharted reason={view.reason} />
      )}
      <LaunchBoundHint history={charts.history} gpu={g} />
    </div>
  );
}

function Mig(props: { device: Device | undefined }): JSX.Element | null {
  const d = props.device;
  if (!d || d.mig) {
    return null; // a MIG device's label says what it is
  }
  if (!d.mig_mode) {
    const why = d.unsupported?.mig_mode;
    return why ? (
      <span
        className="jp-gpu-badge jp-gpu-mig-off"
        title={why}
        data-field="mig"
      >
        MIG not supported
      </span>
    ) : null;
  }
  const { current, pending } = d.mig_mode;
  if (!current && !pending) {
    return null;
  }
  const label =
    current === pending
      ? 'MIG'
      : pending
        ? 'MIG after reset'
        : 'MIG off after reset';
  return (
    <span
      className="jp-gpu-badge jp-gpu-mig"
      title="Multi-Instance GPU mode: its MIG devices follow, each with its memory and processes; whole-GPU utilisation is not reported in this mode."
      data-field="mig"
    >
      {label}
    </span>
  );
}

/** A reading's value, or "not supported" with the reason as its tooltip. */
function Value(props: {
  gpu: GpuSample;
  field: keyof GpuSample;
  children: string;
}): JSX.Element {
  const why = props.gpu.unsupported?.[props.field as string];
  if (props.gpu[props.field] === null && why) {
    return (
      <span
        className="jp-gpu-value jp-gpu-unsupported"
        title={why}
        data-field={props.field}
      >
        not supported
      </span>
    );
  }
  return (
    <span className="jp-gpu-value" data-field={props.field}>
      {props.children}
    </span>
  );
}

function Reading(props: {
  gpu: GpuSample;
  field: keyof GpuSample;
  label: string;
  children: string;
}): JSX.Element {
  return (
    <div className="jp-gpu-reading">
      <dt>{props.label}</dt>
      <dd>
        <Value gpu={props.gpu} field={props.field}>
          {props.children}
        </Value>
      </dd>
    </div>
  );
}
