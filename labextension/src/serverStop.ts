/**
 * The Hub's word that it will stop this server (its idle-server culler posts
 * api/gpu/notices/server-stop, and the server passes it on as an event): the student hears it
 * here, in time to run a cell, rather than in a log she never reads. Pure: unit-tested in
 * src/__tests__/serverStop.test.ts.
 */
import { formatCountdown } from './format';
import type { IServerEvent } from './serverEvent';

/** The `$id` of the server's events/server_stop.json. */
export const SERVER_STOP_EVENT =
  'https://jupyter-gpu.readthedocs.io/events/server-stop';

/**
 * "Your server will be stopped in 1 min 0 s by <by>: <reason>. Run a cell to keep it." for a
 * server-stop event, `elapsed` seconds after it came (the time left counts down), or null for
 * any other event. Written from the event's fields, as the server writes its `message`.
 */
export function serverStopNotice(
  event: IServerEvent,
  elapsed = 0
): string | null {
  const { stop_in_seconds: stopIn, reason, by } = event;
  if (
    event.schema_id !== SERVER_STOP_EVENT ||
    typeof stopIn !== 'number' ||
    typeof reason !== 'string' ||
    typeof by !== 'string'
  ) {
    return null;
  }
  const why = reason.replace(/[. ]+$/, '');
  return (
    `Your server will be stopped in ${formatCountdown(stopIn - elapsed)} by ${by}` +
    (why ? `: ${why}.` : '.') +
    ' Run a cell to keep it.'
  );
}
