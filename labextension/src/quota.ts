/**
 * The server's per-kernel GPU memory quota, as the user meets it: the notice of a kernel that held
 * more than its quota (as NVML counts it) for the grace period, and what the server did.
 */
import { eventMessage, IServerEvent } from './serverEvent';

/** The `$id` of the server's events/kernel_over_limit.json. */
export const OVER_LIMIT_EVENT =
  'https://jupyter-gpu.readthedocs.io/events/kernel-over-limit';

/** The notification text of an over-limit event from jupyter_server's event stream, or null. */
export function overLimitNotice(event: IServerEvent): string | null {
  return eventMessage(event, OVER_LIMIT_EVENT);
}
