/**
 * What the server tells the user on jupyter_server's event stream, shown as notifications that
 * stay until dismissed: the GPU culler's warnings and shutdowns, a kernel over its memory quota,
 * and why a kernel died.
 */
import { Notification } from '@jupyterlab/apputils';
import { Event } from '@jupyterlab/services';

import { deathNotice } from './exits';
import { cullNotice } from './idle';
import { overLimitNotice } from './quota';
import type { IGpuModel } from './tokens';

/** Notify each cull, quota breach and kernel death, and refresh the figures they changed. */
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
    const death = deathNotice(event);
    if (death) {
      Notification.error(death, { autoClose: false });
      model.refresh();
    }
  });
}
