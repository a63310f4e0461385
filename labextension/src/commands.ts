/**
 * The command ids (what the palette, the launcher, the status-bar item and
 * keyboard shortcuts call), the refresh command and the palette's GPU entries.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';

import type { IGpuModel } from './tokens';

export namespace CommandIDs {
  export const open = 'jupyter-gpu:open';
  export const dashboard = 'jupyter-gpu:dashboard';
  export const refresh = 'jupyter-gpu:refresh';
}

export function addRefreshCommand(
  app: JupyterFrontEnd,
  model: IGpuModel
): void {
  app.commands.addCommand(CommandIDs.refresh, {
    label: 'Refresh GPU Figures',
    execute: () => model.refresh()
  });
}

export function addToPalette(palette: ICommandPalette): void {
  palette.addItem({ command: CommandIDs.open, category: 'GPU' });
  palette.addItem({ command: CommandIDs.dashboard, category: 'GPU' });
  palette.addItem({ command: CommandIDs.refresh, category: 'GPU' });
}
