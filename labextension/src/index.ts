/**
 * jupyter-gpu: the GPU sidebar panel, its status-bar item and settings.
 */
import { INotebookTree } from '@jupyter-notebook/tree';
import {
  ILayoutRestorer,
  IRouter,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  Notification,
  WidgetTracker
} from '@jupyterlab/apputils';
import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { GpuDashboard } from './dashboard';
import { gpuIcon } from './icon';
import { cullNotice } from './idle';
import { DEFAULT_SETTINGS, GpuModel, IGpuSettings } from './model';
import { revealCell } from './notebooks';
import { GpuPanel } from './panel';
import { GpuStatus } from './statusbar';

const PLUGIN_ID = 'jupyter-gpu:plugin';

namespace CommandIDs {
  export const open = 'jupyter-gpu:open';
  export const dashboard = 'jupyter-gpu:dashboard';
  export const refresh = 'jupyter-gpu:refresh';
}

/**
 * `?gpu-dashboard` in a page's address opens the dashboard: how a Notebook 7
 * notebook page, whose main area holds the notebook, opens it on a file
 * browser page of its own.
 */
const DASHBOARD_QUERY = 'gpu-dashboard';

function readSettings(settings: ISettingRegistry.ISettings): IGpuSettings {
  const composite = settings.composite as Partial<IGpuSettings>;
  return { ...DEFAULT_SETTINGS, ...composite };
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'GPU sidebar panel and status-bar item fed by the jupyter_gpu server extension.',
  autoStart: true,
  optional: [
    ISettingRegistry,
    IStatusBar,
    ILayoutRestorer,
    ICommandPalette,
    INotebookTracker,
    ILauncher,
    INotebookTree,
    IRouter
  ],
  activate: (
    app: JupyterFrontEnd,
    settingRegistry: ISettingRegistry | null,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    notebooks: INotebookTracker | null,
    launcher: ILauncher | null,
    tree: INotebookTree | null,
    router: IRouter | null
  ) => {
    const model = new GpuModel(app.serviceManager.serverSettings);
    // The GPU culler's warnings and shutdowns arrive on jupyter_server's event stream.
    app.serviceManager.events.stream.connect((_, event) => {
      const message = cullNotice(event);
      if (message) {
        Notification.warning(message, { autoClose: false });
        model.refresh();
      }
    });
    const openPath = (path: string) =>
      app.commands.execute('docmanager:open', { path });
    const panel = new GpuPanel(model, {
      openPath: path => void openPath(path),
      revealCell: (path, cell) =>
        void revealCell(app, notebooks, openPath, path, cell)
    });
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
    // The dashboard: a main-area widget over the same model (the one poll). In
    // Notebook 7 a tab beside Files and Running on the file browser page.
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

    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh GPU Figures',
      execute: () => model.refresh()
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.open, category: 'GPU' });
      palette.addItem({ command: CommandIDs.dashboard, category: 'GPU' });
      palette.addItem({ command: CommandIDs.refresh, category: 'GPU' });
    }

    if (statusBar) {
      const item = new GpuStatus(model, () => {
        void app.commands.execute(CommandIDs.open);
      });
      statusBar.registerStatusItem(PLUGIN_ID, {
        item,
        align: 'left',
        rank: 50,
        isActive: () => model.settings.showStatusBar,
        activeStateChanged: model.stateChanged
      });
    }

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          model.settings = readSettings(settings);
          settings.changed.connect(() => {
            model.settings = readSettings(settings);
          });
        })
        .catch(reason => {
          console.error('jupyter-gpu: could not load settings', reason);
        })
        .then(() => model.start());
    } else {
      model.start();
    }
  }
};

export default plugin;
