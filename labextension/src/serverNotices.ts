/**
 * What the server tells the user on jupyter_server's event stream, shown as notifications that
 * stay until dismissed: the GPU culler's warnings and shutdowns, a kernel over its memory quota,
 * why a kernel died, and the Hub's warning that it will stop the whole server.
 */
import { Notification } from '@jupyterlab/apputils';
import { Event } from '@jupyterlab/services';

import { deathNotice } from './exits';
import { cullNotice } from './idle';
import { overLimitNotice } from './quota';
import { serverStopNotice } from './serverStop';
import type { IGpuModel } from './tokens';

/**
 * Notify each cull, quota breach, kernel death and coming server stop, and refresh the figures
 * they changed.
 */
export function notifyServerEvents(
  events: Event.IManager,
  model: IGpuModel
): void {
  events.stream.connect((_, event) => {
    const cull = cullNotice(event);
    if (cull) {
      Notification.warning(cull, { autoClose: false });
      model.refresh();
    }
    const over = overLimitNotice(event);
    if (over) {
      Notification.warning(over, { autoClose: false });
      model.refresh();
    }
    const stop = serverStopNotice(event);
    if (stop) {
      Notification.warning(stop, { autoClose: false });
    }
    const death = deathNotice(event);
    if (death) {
      Notification.error(death, { autoClose: false });
      model.refresh();
    }
  });
}
