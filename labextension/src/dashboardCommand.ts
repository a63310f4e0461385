/**
 * The GPU Dashboard command: a main-area widget over the same model (the one
 * poll), restored with the layout and offered in the launcher. In Notebook 7
 * a tab beside Files and Running on the file browser page; a notebook,
 * editor or console page, whose main area is taken, opens that page in a
 * new browser tab instead.
 */
import {
  ILayoutRestorer,
  IRouter,
  JupyterFrontEnd
} from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { INotebookTree } from '@jupyter-notebook/tree';
import { ILauncher } from '@jupyterlab/launcher';

import { CommandIDs } from './commands';
import { GpuDashboard } from './dashboard';
import { gpuIcon } from './icon';
import { GpuModel } from './model';

/**
 * `?gpu-dashboard` in a page's address opens the dashboard: how a Notebook 7
 * notebook page, whose main area holds the notebook, opens it on a file
 * browser page of its own.
 */
const DASHBOARD_QUERY = 'gpu-dashboard';

/** Where the dashboard is offered and restored; each is absent in some front ends. */
export interface IDashboardPlaces {
  restorer: ILayoutRestorer | null;
  launcher: ILauncher | null;
  tree: INotebookTree | null;
  router: IRouter | null;
}

export function addDashboardCommand(
  app: JupyterFrontEnd,
  model: GpuModel,
  places: IDashboardPlaces
): void {
  const { restorer, launcher, tree, router } = places;
  const dashboards = new WidgetTracker<MainAreaWidget<GpuDashboard>>({
    namespace: 'jupyter-gpu-dashboard'
  });
  app.commands.addCommand(CommandIDs.dashboard, {
    label: 'GPU Dashboard',
    caption:
      'Charts of every GPU: utilisation, memory by notebook, power, temperature, clocks, PCIe',
    icon: gpuIcon,
    execute: () => {
      const open = dashboards.currentWidget;
      if (open) {
        if (tree) {
          tree.currentWidget = open;
        }
        app.shell.activateById(open.id);
        return open;
      }
      if (!tree && PageConfig.getOption('notebookPage')) {
        // a Notebook 7 notebook, editor or console page: its main area is taken
        const url = URLExt.join(PageConfig.getBaseUrl(), 'tree');
        window.open(`${url}?${DASHBOARD_QUERY}`, '_blank');
        return null;
      }
      const widget = new MainAreaWidget({ content: new GpuDashboard(model) });
      widget.id = 'jupyter-gpu-dashboard';
      widget.title.label = 'GPU Dashboard';
      widget.title.icon = gpuIcon;
      widget.title.closable = true;
      void dashboards.add(widget);
      if (tree) {
        tree.addWidget(widget);
        tree.currentWidget = widget;
      } else {
        app.shell.add(widget, 'main');
      }
      return widget;
    }
  });
  if (tree && router) {
    router.register({
      command: CommandIDs.dashboard,
      pattern: new RegExp(`[?&]${DASHBOARD_QUERY}(?:[=&#]|$)`)
    });
  }
  if (restorer) {
    void restorer.restore(dashboards, {
      command: CommandIDs.dashboard,
      name: () => 'gpu-dashboard'
    });
  }
  if (launcher) {
    launcher.add({ command: CommandIDs.dashboard, category: 'Other' });
  }
}
