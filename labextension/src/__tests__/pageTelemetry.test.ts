import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { MAX_AGE_SECONDS, parsePageTelemetry } from '../pageTelemetry';
import { FakeServer } from './fakeServer';

describe('parsePageTelemetry: the sample the page came with', () => {
  const server = new FakeServer();
  server.addSample(100, 2);
  // as the server extension sends it: a since= reply's JSON text, no history
  const reply = server.telemetry('100');
  const option = JSON.stringify(reply);
  const gpu = reply.latest!.gpus[0];

  it('reads the JSON text the server put in the page, and the object itself', () => {
    const reply = parsePageTelemetry(option, 101);
    assert.equal(reply?.latest?.t, 100);
    assert.deepEqual(
      reply?.latest?.gpus.map(g => g.uuid),
      ['GPU-0', 'GPU-1']
    );
    assert.deepEqual(reply?.history, []);
    assert.deepEqual(parsePageTelemetry(JSON.parse(option), 101), reply);
  });

  it('ignores an option that is missing, not JSON, or not a telemetry reply', () => {
    const broken = [
      undefined,
      '',
      '{"latest": ',
      'null',
      '[]',
      '{}',
      JSON.stringify({ ...reply, latest: { t: 100, gpus: 3 } }),
      JSON.stringify({
        ...reply,
        latest: { t: 100, gpus: [{ ...gpu, index: '0' }] }
      }),
      JSON.stringify({ ...reply, latest: null }), // available, yet no sample
      JSON.stringify({ ...reply, now: 'soon' })
    ];
    for (const raw of broken) {
      assert.equal(parsePageTelemetry(raw, 101), null, String(raw));
    }
  });

  it('takes a server without a GPU at its word: no sample, and why', () => {
    const none = {
      ...reply,
      available: false,
      state: 'unavailable',
      problem: 'driver_not_loaded',
      reason: 'The NVIDIA driver is not loaded.',
      latest: null
    };
    assert.equal(parsePageTelemetry(none, 101)?.reason, none.reason);
  });

  it('shows no figures from a page older than a minute (one read from a cache)', () => {
    assert.notEqual(parsePageTelemetry(option, 100 + MAX_AGE_SECONDS), null);
    assert.equal(parsePageTelemetry(option, 101 + MAX_AGE_SECONDS), null);
  });
});
