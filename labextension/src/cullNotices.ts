/**
 * The GPU culler's warnings and shutdowns, which arrive on jupyter_server's
 * event stream, shown as notifications that stay until dismissed.
 */
import { Notification } from '@jupyterlab/apputils';
import { Event } from '@jupyterlab/services';

import { cullNotice } from './idle';
import type { IGpuModel } from './tokens';

/** Notify each cull event, and refresh the figures it changed. */
export function notifyCulls(events: Event.IManager, model: IGpuModel): void {
  events.stream.connect((_, event) => {
    const message = cullNotice(event);
    if (message) {
      Notification.warning(message, { autoClose: false });
      model.refresh();
    }
  });
}
