/**
 * The panel's "Who holds GPU memory": the kernels of this server that hold
 * GPU memory, one row each, then the processes that are no kernel of it.
 */
import * as React from 'react';

import { formatBytes, MemoryUnits } from './format';
import { KernelRow } from './kernelRow';
import { GpuModel } from './model';
import { INotebookLinks } from './notebooks';
import { Prose } from './prose';
import { holders, rowLabel } from './shape';
import type { GpuSample, UnattributedProcess } from './types';

export function Holders(props: {
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
          <ProcessRow
            key={`${u.pid}-${u.uuid}`}
            proc={u}
            units={units}
            gpuList={m.telemetry?.latest?.gpus ?? []}
          />
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

function ProcessRow(props: {
  proc: UnattributedProcess;
  units: MemoryUnits;
  gpuList: GpuSample[];
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
        <span className="jp-gpu-chip">{rowLabel(props.gpuList, p)}</span>
        <span className="jp-gpu-chip">not a kernel of this server</span>
      </div>
      {p.reason && (
        <div className="jp-gpu-hint" data-field="process-reason">
          {p.reason}
        </div>
      )}
    </li>
  );
}
