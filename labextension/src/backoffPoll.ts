/**
 * Lumino's Poll, with retries never sooner than the poll's interval.
 *
 * Lumino draws each wait after a failure from [interval, 3 × the last wait].
 * After an immediate tick (start, refresh: a wait of 0) that range is upside
 * down and the draw falls anywhere in (0, interval]: opening the panel while
 * the server is down sent three requests in under a second. The interval is
 * the floor here, and the backoff grows from it.
 */
import { Poll } from '@lumino/polling';

type Next = Parameters<Poll['schedule']>[0];

export class BackoffPoll extends Poll {
  async schedule(next: Next = {}): Promise<void> {
    const floor = this.frequency.interval;
    if (
      next.phase === 'rejected' &&
      next.interval !== undefined &&
      next.interval !== Poll.NEVER &&
      next.interval < floor
    ) {
      next = { ...next, interval: floor };
    }
    return super.schedule(next);
  }
}
