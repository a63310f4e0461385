/**
 * The GPU panel in the left sidebar, restored with the layout, and the
 * command that shows it.
 */
import { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';

import { CommandIDs } from './commands';
import { gpuIcon } from './icon';
import { GpuModel } from './model';
import { INotebookLinks } from './notebooks';
import { GpuPanel } from './panel';

export function addSidebarPanel(
  app: JupyterFrontEnd,
  model: GpuModel,
  links: INotebookLinks,
  restorer: ILayoutRestorer | null
): void {
  const panel = new GpuPanel(model, links);
  panel.id = 'jupyter-gpu-panel';
  panel.title.icon = gpuIcon;
  panel.title.caption = 'GPU';
  app.shell.add(panel, 'left', { rank: 600 });
  if (restorer) {
    restorer.add(panel, 'jupyter-gpu-panel');
  }

  app.commands.addCommand(CommandIDs.open, {
    label: 'Show GPU Panel',
    caption: 'Open the GPU sidebar panel',
    icon: gpuIcon,
    execute: () => app.shell.activateById(panel.id)
  });
}
