/**
 * Status-bar item: utilisation and memory of the busiest GPU, or "no GPU".
 * Clicking it opens the GPU panel. The `showStatusBar` setting hides it.
 */
import { IStatusBar, TextItem } from '@jupyterlab/statusbar';
import * as React from 'react';

import { gpuIcon } from './icon';
import { GpuModel } from './model';
import { OnScreenRenderer } from './onScreen';
import { statusText } from './summary';

export class GpuStatus extends OnScreenRenderer<GpuModel> {
  constructor(model: GpuModel, open: () => void) {
    super(model);
    this.addClass('jp-gpu-status');
    this.node.setAttribute('role', 'button');
    this.node.addEventListener('click', open);
  }

  protected showing(visible: boolean): void {
    this.model.setStatusBarVisible(visible);
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
}

/** Put the item at the left of the status bar, shown as the settings say. */
export function addStatusItem(
  statusBar: IStatusBar,
  id: string,
  model: GpuModel,
  open: () => void
): void {
  statusBar.registerStatusItem(id, {
    item: new GpuStatus(model, open),
    align: 'left',
    rank: 50,
    isActive: () => model.settings.showStatusBar,
    activeStateChanged: model.stateChanged
  });
}
