/**
 * What the server says on jupyter_server's event stream: the `message` of one of its events.
 * Pure: the culler's and the kernel deaths' notices both read events through it.
 */

/** An event as jupyter_server's event stream delivers it. */
export interface IServerEvent {
  schema_id: string;
  [key: string]: unknown;
}

/** The event's `message` when it is of schema `schemaId`, else null. */
export function eventMessage(
  event: IServerEvent,
  schemaId: string
): string | null {
  if (event.schema_id !== schemaId || typeof event.message !== 'string') {
    return null;
  }
  return event.message;
}
