/**
 * What the server tells the user on jupyter_server's event stream, shown as notifications that
 * stay until dismissed: the GPU culler's warnings and shutdowns, and why a kernel died.
 */
import { Notification } from '@jupyterlab/apputils';
import { Event } from '@jupyterlab/services';

import { deathNotice } from './exits';
import { cullNotice } from './idle';
import type { IGpuModel } from './tokens';

/** Notify each cull and kernel death, and refresh the figures they changed. */
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
    const death = deathNotice(event);
    if (death) {
      Notification.error(death, { autoClose: false });
      model.refresh();
    }
  });
}
