/**
 * The "GPU" sidebar panel: one card per GPU, who holds GPU memory, and the
 * no-GPU state. Rendering only; the data comes from GpuModel.
 */
import * as React from 'react';

import { CellTimeline } from './cellTimeline';
import {
  formatAge,
  formatBytes,
  formatBytesOf,
  formatCelsius,
  formatMHz,
  formatPercent,
  formatPower,
  formatRate,
  formatRatio,
  MemoryUnits,
  proseParts
} from './format';
import { MemoryChart, UtilisationChart } from './gpuCharts';
import { idleLabel } from './idle';
import { KernelActions } from './kernelActions';
import { GpuModel } from './model';
import { OnScreenRenderer } from './onScreen';
import { viewRange, windowCut } from './series';
import {
  allocatorMissing,
  deviceFor,
  gpuIndexForUuid,
  holders,
  kernelLabel,
  kernelMemory
} from './shape';
import type {
  AllocatorFigures,
  Cell,
  Device,
  GpuSample,
  Kernel,
  ProcessOwner,
  Sample,
  UnattributedProcess
} from './types';

/** Open a notebook, and show one of its cells. */
export interface INotebookLinks {
  openPath: (path: string) => void;
  revealCell: (path: string, cell: Cell) => void;
}

export class GpuPanel extends OnScreenRenderer<GpuModel> {
  constructor(model: GpuModel, links: INotebookLinks) {
    super(model);
    this._links = links;
    this.addClass('jp-gpu-panel');
  }

  protected showing(visible: boolean): void {
    this.model.setPanelVisible(visible);
  }

  render(): JSX.Element {
    const m = this.model;
    return (
      <div className={`jp-gpu-content${m.error ? ' jp-gpu-stale' : ''}`}>
        <Header model={m} />
        {m.error && (
          <div className="jp-gpu-error" role="alert">
            {m.error}
          </div>
        )}
        {!m.loaded && !m.error && (
          <div className="jp-gpu-loading">Loading GPU figures…</div>
        )}
        {m.available === false && <NoGpu reason={m.reason} />}
        {m.available && <Cards model={m} />}
        {m.available && <Holders model={m} links={this._links} />}
      </div>
    );
  }

  private _links: INotebookLinks;
}

function Header(props: { model: GpuModel }): JSX.Element {
  const d = props.model.devices;
  return (
    <div className="jp-gpu-header">
      <h2 className="jp-gpu-title">GPU</h2>
      {props.model.simulated && (
        <span
          className="jp-gpu-badge jp-gpu-simulated"
          title="These readings are replayed from a recording by the simulated backend; they are not this machine's GPUs."
        >
          simulated
        </span>
      )}
      {d && d.driver_version && (
        <span className="jp-gpu-driver" data-field="driver">
          driver {d.driver_version}
          {d.cuda_driver_version ? ` · CUDA ${d.cuda_driver_version}` : ''}
        </span>
      )}
    </div>
  );
}

/** A server sentence with its `backticked` commands shown as code. */
function Prose(props: { text: string }): JSX.Element {
  return (
    <>
      {proseParts(props.text).map((part, i) =>
        part.code ? <code key={i}>{part.text}</code> : part.text
      )}
    </>
  );
}

function NoGpu(props: { reason: string | null }): JSX.Element {
  return (
    <div className="jp-gpu-nogpu" data-state="no-gpu">
      <h3>No usable GPU</h3>
      <p className="jp-gpu-reason" data-field="reason">
        <Prose text={props.reason || 'The server reports no usable GPU.'} />
      </p>
      <p className="jp-gpu-hint">
        This is what the Jupyter server found when it asked the NVIDIA driver
        (NVML). Once it is fixed, this panel recovers by itself. For a full
        check from inside a notebook (PyTorch build, CUDA_VISIBLE_DEVICES,
        driver version), run <code>%load_ext jupyter_gpu</code> and then{' '}
        <code>%gpu_doctor</code>.
      </p>
    </div>
  );
}

function Cards(props: { model: GpuModel }): JSX.Element {
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
  return (
    <section
      className={`jp-gpu-card jp-gpu-state-${g.state}`}
      data-gpu-index={g.index}
      data-gpu-uuid={g.uuid}
    >
      <div className="jp-gpu-card-title">
        <span className="jp-gpu-index">GPU {g.index}</span>
        <span className="jp-gpu-name" title={device?.pci_bus_id ?? undefined}>
          {name}
        </span>
        <Mig device={device} />
      </div>
      {g.state !== 'ok' && (
        <div className="jp-gpu-error" role="alert" data-field="state">
          {g.error || 'GPU lost'}
        </div>
      )}
      <div className="jp-gpu-chart">
        <div className="jp-gpu-chart-label">
          <span>Utilisation</span>
          <Value gpu={g} field="utilization_gpu_percent">
            {formatPercent(g.utilization_gpu_percent)}
          </Value>
        </div>
        <UtilisationChart {...charts} />
      </div>
      <div className="jp-gpu-chart">
        <div className="jp-gpu-chart-label">
          <span>Memory</span>
          <Value gpu={g} field="memory_used_bytes">
            {formatBytesOf(g.memory_used_bytes, total || null, units)}
          </Value>
        </div>
        <MemoryChart {...charts} owners={props.owners} total={total || null} />
      </div>
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
    </section>
  );
}

function Mig(props: { device: Device | undefined }): JSX.Element | null {
  const d = props.device;
  if (!d) {
    return null;
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
      title="Multi-Instance GPU mode: whole-GPU utilisation is not reported in this mode."
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

function Holders(props: {
  model: GpuModel;
  links: INotebookLinks;
}): JSX.Element {
  const m = props.model;
  const units = m.settings.memoryUnits;
  const h = holders(m.kernels, m.settings.gpus);
  let body: JSX.Element;
  if (m.kernels === null) {
    body = <div className="jp-gpu-loading">Loading…</div>;
  } else if (m.kernels.state !== 'ok') {
    body = (
      <div className="jp-gpu-empty">
        <Prose text={m.kernels.reason ?? 'Not available.'} />
      </div>
    );
  } else if (h.kernels.length === 0 && h.unattributed.length === 0) {
    body = <div className="jp-gpu-empty">No process holds GPU memory.</div>;
  } else {
    body = (
      <ul className="jp-gpu-holders-list">
        {h.kernels.map(k => (
          <KernelRow
            key={k.id}
            kernel={k}
            units={units}
            gpus={m.settings.gpus}
            gpuList={m.telemetry?.latest?.gpus ?? []}
            links={props.links}
            loadCells={m.cells}
            actionsAllowed={m.kernels?.actions_allowed ?? false}
            act={m.act}
          />
        ))}
        {h.unattributed.map(u => (
          <ProcessRow key={`${u.pid}-${u.uuid}`} proc={u} units={units} />
        ))}
      </ul>
    );
  }
  return (
    <section className="jp-gpu-holders">
      <h3>Who holds GPU memory</h3>
      {body}
      {h.hidden > 0 && (
        <div className="jp-gpu-hint" data-field="hidden">
          {h.hidden} process{h.hidden === 1 ? '' : 'es'} of other users not
          shown.
        </div>
      )}
    </section>
  );
}

function KernelRow(props: {
  kernel: Kernel;
  units: MemoryUnits;
  gpus: number[];
  gpuList: GpuSample[];
  links: INotebookLinks;
  loadCells: GpuModel['cells'];
  actionsAllowed: boolean;
  act: GpuModel['act'];
}): JSX.Element {
  const k = props.kernel;
  const label = kernelLabel(k);
  const idle = idleLabel(k, props.units);
  const path = k.path;
  const [open, setOpen] = React.useState(false);
  return (
    <li
      className={`jp-gpu-holder jp-gpu-kernel${idle ? ' jp-gpu-idle-holder' : ''}`}
      data-kernel-id={k.id}
    >
      <div className="jp-gpu-holder-main">
        {path ? (
          <button
            className="jp-gpu-link"
            title={`Open ${path}`}
            onClick={() => props.links.openPath(path)}
          >
            {label}
          </button>
        ) : (
          <span className="jp-gpu-holder-name">{label}</span>
        )}
        <span className="jp-gpu-holder-state">{k.execution_state}</span>
        <span className="jp-gpu-value" data-field="kernel-memory">
          {formatBytes(kernelMemory(k, props.gpus), props.units)}
        </span>
      </div>
      {idle && (
        <div
          className="jp-gpu-chip jp-gpu-warn"
          data-field="idle-holding"
          title="This kernel has been idle for a while and still holds GPU memory that other notebooks could use."
        >
          {idle}
          {k.cull_in_seconds !== null &&
            ` · shut down in ${formatAge(k.cull_in_seconds)} unless used`}
        </div>
      )}
      <KernelActions
        kernel={k}
        allowed={props.actionsAllowed}
        units={props.units}
        act={props.act}
      />
      <div className="jp-gpu-holder-detail">
        {k.gpu_memory.map(g => (
          <span key={g.gpu_index} className="jp-gpu-chip">
            GPU {g.gpu_index}: {formatBytes(g.used_memory_bytes, props.units)}
          </span>
        ))}
        {k.pid !== null && <span className="jp-gpu-chip">pid {k.pid}</span>}
        <button
          className="jp-gpu-timeline-toggle"
          aria-expanded={open}
          title="Which cell took the memory: this kernel's per-cell timeline"
          onClick={() => setOpen(!open)}
        >
          {open ? 'hide cells' : 'cells'}
        </button>
      </div>
      {open && (
        <CellTimeline
          kernelId={k.id}
          path={path}
          units={props.units}
          load={props.loadCells}
          reveal={props.links.revealCell}
        />
      )}
      {k.allocator_state === 'ok' && k.allocator ? (
        <Allocator
          allocator={k.allocator}
          gpus={props.gpuList}
          units={props.units}
        />
      ) : (
        kernelMemory(k) > 0 && (
          <div
            className="jp-gpu-hint"
            data-field="allocator-missing"
            title={k.allocator_reason ?? undefined}
          >
            {k.allocator_state === 'no_stats' ? (
              <>
                No PyTorch allocator figures: run{' '}
                <code>%load_ext jupyter_gpu</code> in this notebook.
              </>
            ) : (
              <Prose
                text={`No PyTorch allocator figures (${allocatorMissing(k)}).`}
              />
            )}
          </div>
        )
      )}
    </li>
  );
}

function Allocator(props: {
  allocator: AllocatorFigures;
  gpus: GpuSample[];
  units: MemoryUnits;
}): JSX.Element {
  const a = props.allocator;
  const u = props.units;
  return (
    <div
      className="jp-gpu-allocator"
      data-field="allocator"
      title="PyTorch's caching allocator in this kernel, as the kernel published it"
    >
      {a.devices.map(d => {
        const nvml = gpuIndexForUuid(props.gpus, d.uuid);
        return (
          <div key={d.index} className="jp-gpu-allocator-device">
            <span className="jp-gpu-chip">
              {nvml === null
                ? `cuda:${d.index}`
                : `GPU ${nvml} (cuda:${d.index})`}
            </span>{' '}
            allocated {formatBytes(d.allocated_bytes, u)} · cached{' '}
            {formatBytes(d.reserved_bytes, u)} ·{' '}
            <span
              data-field="fragmentation"
              title="Free memory trapped in cached blocks that also hold live tensors (inactive split ÷ cached); torch.cuda.empty_cache() cannot return it."
            >
              fragmented {formatRatio(d.fragmentation)}
            </span>
            {(d.num_ooms ?? 0) > 0 && (
              <span className="jp-gpu-chip jp-gpu-warn">
                {d.num_ooms} out-of-memory error{d.num_ooms === 1 ? '' : 's'}
              </span>
            )}
          </div>
        );
      })}
      <div className="jp-gpu-hint">as of {formatAge(a.age_seconds)} ago</div>
    </div>
  );
}

function ProcessRow(props: {
  proc: UnattributedProcess;
  units: MemoryUnits;
}): JSX.Element {
  const p = props.proc;
  return (
    <li className="jp-gpu-holder jp-gpu-process" data-pid={p.pid}>
      <div className="jp-gpu-holder-main">
        <span className="jp-gpu-holder-name" title={p.command ?? undefined}>
          pid {p.pid}
          {p.command ? ` ${p.command.split(/\s+/)[0].split('/').pop()}` : ''}
        </span>
        {p.user && <span className="jp-gpu-holder-state">{p.user}</span>}
        <span className="jp-gpu-value" data-field="process-memory">
          {formatBytes(p.used_memory_bytes, props.units)}
        </span>
      </div>
      <div className="jp-gpu-holder-detail">
        <span className="jp-gpu-chip">GPU {p.gpu_index}</span>
        <span className="jp-gpu-chip">not a kernel of this server</span>
      </div>
    </li>
  );
}
