import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { CULL_EVENT } from '../idle';
import type { IServerEvent } from '../serverEvent';
import { SERVER_STOP_EVENT, serverStopNotice } from '../serverStop';

const EVENT = {
  schema_id: SERVER_STOP_EVENT,
  stop_in_seconds: 60,
  reason: 'every kernel idle for at least 30 min',
  by: "the Hub's idle culler",
  message: 'what the server said'
};

describe('the server-stop notice', () => {
  it('says when, by whom, why, and what keeps the server', () => {
    assert.equal(
      serverStopNotice(EVENT),
      "Your server will be stopped in 1 min 0 s by the Hub's idle culler: every kernel " +
        'idle for at least 30 min. Run a cell to keep it.'
    );
  });

  it('counts the time left down, never below zero', () => {
    assert.match(serverStopNotice(EVENT, 15) ?? '', / stopped in 45 s by /);
    assert.match(serverStopNotice(EVENT, 90) ?? '', / stopped in 0 s by /);
  });

  it('writes a reason with or without its full stop, and none at all', () => {
    const said = (reason: string) => serverStopNotice({ ...EVENT, reason });
    assert.equal(said('idle.'), said('idle'));
    assert.match(said('idle') ?? '', /: idle\. Run a cell/);
    assert.match(said('') ?? '', /by the Hub's idle culler\. Run a cell/);
  });

  it('is for its own events only, with the fields it needs', () => {
    assert.equal(serverStopNotice({ ...EVENT, schema_id: CULL_EVENT }), null);
    assert.equal(serverStopNotice({ ...EVENT, stop_in_seconds: '60' }), null);
    assert.equal(serverStopNotice({ ...EVENT, by: null }), null);
    const noReason: IServerEvent = { ...EVENT };
    delete noReason.reason;
    assert.equal(serverStopNotice(noReason), null);
  });
});
