/**
 * The "GPU" sidebar panel: one card per GPU, who holds GPU memory, and the
 * no-GPU state. Rendering only; the data comes from GpuModel.
 */
import * as React from 'react';

import { Cards } from './gpuCards';
import { Holders } from './holders';
import { hostMemory, hostShm } from './host';
import { GpuModel } from './model';
import { INotebookLinks } from './notebooks';
import { OnScreenRenderer } from './onScreen';
import { Prose } from './prose';

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
        <HostLimits model={m} />
        {m.error && (
          <div className="jp-gpu-error" role="alert">
            {m.error}
          </div>
        )}
        {!m.polled && !m.error && (
          <div className="jp-gpu-loading">Loading GPU figures…</div>
        )}
        {m.polled && m.available === false && <NoGpu reason={m.reason} />}
        {m.polled && m.available && <Cards model={m} />}
        {m.polled && m.available && <Holders model={m} links={this._links} />}
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

/** The container's memory limit and /dev/shm, when the server reads them (GET api/gpu/host). */
function HostLimits(props: { model: GpuModel }): JSX.Element | null {
  const units = props.model.settings.memoryUnits;
  const lines = [
    hostMemory(props.model.host, units),
    hostShm(props.model.host, units)
  ].filter((line): line is string => line !== null);
  if (!lines.length) {
    return null;
  }
  return (
    <div className="jp-gpu-host" data-field="host">
      {lines.map(line => (
        <div key={line}>{line}</div>
      ))}
    </div>
  );
}
