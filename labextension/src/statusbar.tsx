/**
 * Status-bar item: utilisation and memory of the busiest GPU, or "no GPU".
 * Clicking it opens the GPU panel.
 */
import { TextItem } from '@jupyterlab/statusbar';
import { VDomRenderer } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { formatBytesOf, formatPercent } from './format';
import { GpuModel } from './model';

/** The status-bar text and its tooltip; exported for tests. */
export function statusText(model: GpuModel): { text: string; title: string } {
  const sim = model.simulated ? ' (simulated)' : '';
  if (model.error && !model.loaded) {
    return { text: 'GPU: offline', title: model.error };
  }
  if (model.available === null) {
    return { text: 'GPU …', title: 'Waiting for GPU figures' };
  }
  if (!model.available) {
    return { text: 'no GPU', title: model.reason ?? 'No usable GPU' };
  }
  const g = model.busiest;
  if (!g) {
    return { text: 'GPU: lost', title: 'No selected GPU is answering' };
  }
  const util = formatPercent(g.utilization_gpu_percent);
  const mem = formatBytesOf(
    g.memory_used_bytes,
    g.memory_total_bytes,
    model.settings.memoryUnits
  );
  const text = `GPU ${g.index}: ${util} · ${mem}${model.simulated ? ' · sim' : ''}`;
  const title = `Busiest GPU${sim}: GPU ${g.index}, utilisation ${util}, memory ${mem}. Click to open the GPU panel.`;
  return { text, title };
}

export class GpuStatus extends VDomRenderer<GpuModel> {
  constructor(model: GpuModel, open: () => void) {
    super(model);
    this._open = open;
    this.addClass('jp-gpu-status');
    this.node.setAttribute('role', 'button');
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.node.addEventListener('click', this._open);
    this.model.setStatusBarVisible(true);
  }

  protected onBeforeDetach(msg: Message): void {
    this.node.removeEventListener('click', this._open);
    this.model.setStatusBarVisible(false);
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.model.setStatusBarVisible(true);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this.model.setStatusBarVisible(false);
  }

  render(): JSX.Element {
    const { text, title } = statusText(this.model);
    this.node.title = title;
    return <TextItem source={text} title={title} />;
  }

  private _open: () => void;
}
