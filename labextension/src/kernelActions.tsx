/**
 * The actions on a kernel of this server in the GPU panel: free cache,
 * interrupt, restart, shut down, each after a confirmation that says what
 * will be lost. A user the server does not let act on kernels sees why
 * instead of buttons.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import * as React from 'react';

import { MemoryUnits } from './format';
import { actionDone, confirmation, KERNEL_ACTIONS, KernelAction } from './idle';
import { GpuModel } from './model';
import type { Kernel } from './types';

const LABELS: { [A in KernelAction]: string } = {
  'free-cache': 'free cache',
  interrupt: 'interrupt',
  restart: 'restart',
  shutdown: 'shut down'
};

export function KernelActions(props: {
  kernel: Kernel;
  allowed: boolean;
  units: MemoryUnits;
  act: GpuModel['act'];
}): JSX.Element {
  const k = props.kernel;
  const [result, setResult] = React.useState<{
    text: string;
    failed: boolean;
  } | null>(null);
  if (!props.allowed) {
    return (
      <div className="jp-gpu-hint" data-field="actions-denied">
        This server does not let you act on kernels (free cache, interrupt,
        restart, shut down).
      </div>
    );
  }
  const run = async (action: KernelAction) => {
    const ask = confirmation(action, k, props.units);
    const answer = await showDialog({
      title: ask.title,
      body: ask.body,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: ask.label })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      const freed = await props.act(k.id, action);
      setResult({
        text: actionDone(action, freed, props.units),
        failed: false
      });
    } catch (error) {
      const message =
        error instanceof ServerConnection.ResponseError
          ? `${error.response.status}: ${error.message}`
          : String(error);
      setResult({
        text: `Could not ${LABELS[action]}: ${message}`,
        failed: true
      });
    }
  };
  return (
    <div className="jp-gpu-kernel-actions" data-field="kernel-actions">
      {KERNEL_ACTIONS.map(action => (
        <button
          key={action}
          className="jp-gpu-action"
          data-action={action}
          title={confirmation(action, k, props.units).body}
          onClick={() => void run(action)}
        >
          {LABELS[action]}
        </button>
      ))}
      {result && (
        <span
          className={`jp-gpu-hint${result.failed ? ' jp-gpu-warn' : ''}`}
          data-field="action-result"
          role={result.failed ? 'alert' : 'status'}
        >
          {result.text}
        </span>
      )}
    </div>
  );
}
