/**
 * Status-bar item: utilisation and memory of the busiest GPU, or "no GPU".
 * Clicking it opens the GPU panel.
 */
import { TextItem } from '@jupyterlab/statusbar';
import { VDomRenderer } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { gpuIcon } from './icon';
import { GpuModel } from './model';
import { statusText } from './summary';

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
    this.toggleClass('jp-gpu-stale', !!this.model.error);
    return (
      <>
        <gpuIcon.react
          tag="span"
          className="jp-gpu-status-icon"
          stylesheet="statusBar"
        />
        <TextItem source={text} title={title} />
      </>
    );
  }

  private _open: () => void;
}
