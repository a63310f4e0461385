/**
 * One kernel's row in "Who holds GPU memory": its notebook, the GPU memory it
 * holds and whether it sits idle on it, the actions on it, its per-cell
 * timeline on demand, and PyTorch's allocator figures (or why there are none).
 */
import * as React from 'react';

import { CellTimeline } from './cellTimeline';
import { formatAge, formatBytes, formatRatio, MemoryUnits } from './format';
import { idleLabel } from './idle';
import { KernelActions } from './kernelActions';
import { GpuModel } from './model';
import { INotebookLinks } from './notebooks';
import { Prose } from './prose';
import {
  allocatorMissing,
  deviceLabel,
  gpuForUuid,
  kernelLabel,
  kernelMemory,
  rowLabel
} from './shape';
import type { AllocatorFigures, GpuSample, Kernel } from './types';

export function KernelRow(props: {
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
        {k.gpu_memory.map(g => {
          const limit = k.memory_limit_bytes;
          const over = limit !== null && g.used_memory_bytes > limit;
          return (
            <span
              key={g.gpu_index}
              className={`jp-gpu-chip${over ? ' jp-gpu-warn' : ''}`}
              data-field="kernel-gpu-memory"
              title={
                limit === null
                  ? undefined
                  : `This server's quota: each kernel may hold ${formatBytes(limit, props.units)} per GPU through PyTorch${over ? '; this kernel holds more (memory PyTorch does not govern, or child processes)' : ''}.`
              }
            >
              {rowLabel(props.gpuList, g)}:{' '}
              {formatBytes(g.used_memory_bytes, props.units)}
              {limit !== null && ` of ${formatBytes(limit, props.units)} quota`}
            </span>
          );
        })}
        {k.pid !== null && <span className="jp-gpu-chip">pid {k.pid}</span>}
        {(k.assigned_gpus ?? []).map(uuid => {
          const gpu = gpuForUuid(props.gpuList, uuid);
          return (
            <span
              key={`assigned-${uuid}`}
              className="jp-gpu-chip"
              data-field="assigned-gpu"
              title={`The server gave this kernel CUDA_VISIBLE_DEVICES=${uuid} when it started (the GPU with the most free memory then).`}
            >
              assigned {gpu ? deviceLabel(gpu) : uuid}
            </span>
          );
        })}
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
        const nvml = gpuForUuid(props.gpus, d.uuid);
        return (
          <div key={d.index} className="jp-gpu-allocator-device">
            <span className="jp-gpu-chip">
              {nvml === null
                ? `cuda:${d.index}`
                : `${deviceLabel(nvml)} (cuda:${d.index})`}
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
