/**
 * Kernel deaths the server explains (jupyter_gpu/server/events/kernel_died.json): the text of
 * the notification. Pure: unit-tested in src/__tests__/exits.test.ts.
 */
import { eventMessage, IServerEvent } from './serverEvent';

/** The `$id` of the server's kernel-died events. */
export const DEATH_EVENT =
  'https://jupyter-gpu.readthedocs.io/events/kernel-died';

/** The notification text of a kernel-died event from jupyter_server's event stream, or null. */
export function deathNotice(event: IServerEvent): string | null {
  return eventMessage(event, DEATH_EVENT);
}
