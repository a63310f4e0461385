/**
 * jupyter-gpu: the GPU sidebar panel, the GPU Dashboard, the status-bar item
 * and their settings, over one shared model that other plugins may require
 * (`IGpuModel`). Wiring only: each part lives in a module of its own.
 */
import { INotebookTree } from '@jupyter-notebook/tree';
import {
  ILayoutRestorer,
  IRouter,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { addRefreshCommand, addToPalette, CommandIDs } from './commands';
import { notifyServerEvents } from './serverNotices';
import { addDashboardCommand } from './dashboardCommand';
import { GpuModel } from './model';
import { notebookLinks } from './notebooks';
import { pageTelemetry } from './pageTelemetry';
import { followSettings } from './settings';
import { addSidebarPanel } from './sidebar';
import { addStatusItem } from './statusbar';
import { IGpuModel } from './tokens';

export * from './tokens';

const PLUGIN_ID = 'jupyter-gpu:plugin';

const plugin: JupyterFrontEndPlugin<IGpuModel> = {
  id: PLUGIN_ID,
  description:
    'GPU sidebar panel and status-bar item fed by the jupyter_gpu server extension.',
  autoStart: true,
  provides: IGpuModel,
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
  ): IGpuModel => {
    const model = new GpuModel(app.serviceManager.serverSettings);
    // figures from the page itself: the status bar has them at its first render
    const seed = pageTelemetry();
    if (seed) {
      model.seed(seed);
    }
    notifyServerEvents(app.serviceManager.events, model);
    addSidebarPanel(app, model, notebookLinks(app, notebooks), restorer);
    addDashboardCommand(app, model, { restorer, launcher, tree, router });
    addRefreshCommand(app, model);
    if (palette) {
      addToPalette(palette);
    }
    if (statusBar) {
      addStatusItem(statusBar, PLUGIN_ID, model, () => {
        void app.commands.execute(CommandIDs.open);
      });
    }
    void followSettings(settingRegistry, PLUGIN_ID, model).then(() =>
      model.start()
    );
    return model;
  }
};

export default plugin;
