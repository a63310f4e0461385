/**
 * The panel's links into notebooks: open a notebook, or show a cell of it.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import type { Cell } from './types';

/** Open a notebook, and show one of its cells. */
export interface INotebookLinks {
  openPath: (path: string) => void;
  revealCell: (path: string, cell: Cell) => void;
}

/** The links, through the document manager's open command. */
export function notebookLinks(
  app: JupyterFrontEnd,
  notebooks: INotebookTracker | null
): INotebookLinks {
  const openPath = (path: string) =>
    app.commands.execute('docmanager:open', { path });
  return {
    openPath: path => void openPath(path),
    revealCell: (path, cell) =>
      void revealCell(app, notebooks, openPath, path, cell)
  };
}

/**
 * Show a cell of a notebook: open the notebook if needed, then select the
 * cell and scroll to it (by JupyterLab's cell id; by execution count when the
 * front end that ran it sent no id).
 */
async function revealCell(
  app: JupyterFrontEnd,
  notebooks: INotebookTracker | null,
  openPath: (path: string) => Promise<unknown>,
  path: string,
  cell: Cell
): Promise<void> {
  const widget = (await openPath(path)) as NotebookPanel | undefined;
  const panel =
    widget instanceof NotebookPanel
      ? widget
      : notebooks?.find(p => p.context.path === path);
  if (!panel) {
    return;
  }
  await panel.context.ready;
  const notebook = panel.content;
  const index = notebook.widgets.findIndex(w =>
    cell.cell_id !== null
      ? w.model.id === cell.cell_id
      : w.model.type === 'code' &&
        (w.model as ICodeCellModel).executionCount === cell.execution_count
  );
  if (index < 0) {
    return; // deleted since it ran, or the notebook was reloaded from disk
  }
  app.shell.activateById(panel.id);
  notebook.activeCellIndex = index;
  await notebook.scrollToItem(index, 'center');
}
