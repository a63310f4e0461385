// First: the page GpuModel's polls watch must exist before @lumino/polling loads.
import { setTabVisible } from './pageVisibility';

import { strict as assert } from 'node:assert';
import { afterEach, beforeEach, describe, it, mock } from 'node:test';

import { GpuModel } from '../model';
import { parsePageTelemetry } from '../pageTelemetry';
import { DEFAULT_SETTINGS } from '../settings';
import { statusText } from '../summary';
import { FakeServer } from './fakeServer';

/** The default refresh interval, in ms. */
const INTERVAL = DEFAULT_SETTINGS.refreshInterval * 1000;
/** The longest wait between attempts while the server cannot be reached. */
const MAX_BACKOFF = 30 * 1000;

/** Let every reply the fake server gave be handled (no time passes). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setImmediate(resolve));
  }
}

/** Move the mocked clock on by `ms`, a second at a time, handling each reply. */
async function advance(ms: number): Promise<void> {
  await settle();
  mock.timers.tick(0); // what is due now
  await settle();
  for (let left = ms; left > 0; left -= 1000) {
    mock.timers.tick(Math.min(1000, left));
    await settle();
  }
}

/** The gaps between successive times. */
function gaps(times: number[]): number[] {
  return times.slice(1).map((t, i) => t - times[i]);
}

describe('GpuModel: the one poll of the server', () => {
  let server: FakeServer;
  let model: GpuModel;

  beforeEach(() => {
    mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
    server = new FakeServer();
    server.addSample(100);
    model = new GpuModel(server.settings);
  });

  afterEach(() => {
    model.dispose();
    mock.timers.reset();
    mock.restoreAll();
    setTabVisible(true);
  });

  it('asks for telemetry at the refresh interval, only for samples it lacks', async () => {
    model.start();
    model.setStatusBarVisible(true);
    await advance(0);
    assert.equal(model.loaded, true);
    assert.equal(model.available, true);
    assert.deepEqual(
      model.gpus.map(g => g.uuid),
      ['GPU-0']
    );
    server.addSample(101);
    await advance(INTERVAL);
    server.addSample(102);
    await advance(INTERVAL);

    assert.deepEqual(server.times('telemetry'), [0, INTERVAL, 2 * INTERVAL]);
    assert.deepEqual(server.sinces(), [null, '100', '101']);
    assert.deepEqual(
      model.history.map(s => s.t),
      [100, 101, 102]
    );
    // the devices once: neither NVML's state nor the set of GPUs changed
    assert.deepEqual(server.times('devices'), [0]);
    assert.equal(model.devices?.devices[0].name, 'NVIDIA H200');
  });

  it('asks for the devices again when a GPU appears', async () => {
    model.start();
    model.setStatusBarVisible(true);
    await advance(0);
    server.addSample(101, 2);
    await advance(INTERVAL);
    assert.deepEqual(server.times('devices'), [0, INTERVAL]);
    assert.equal(model.devices?.devices.length, 2);
  });

  it('follows a new refresh interval from the settings', async () => {
    model.settings = { ...DEFAULT_SETTINGS, refreshInterval: 5 };
    model.start();
    model.setStatusBarVisible(true);
    await advance(15000);
    assert.deepEqual(server.times('telemetry'), [0, 5000, 10000, 15000]);
  });

  it('asks nothing while no view is on screen; the dashboard alone needs no kernels', async () => {
    model.start();
    await advance(20000);
    assert.equal(server.requests.length, 0);

    model.setDashboardVisible(true);
    await advance(2 * INTERVAL);
    assert.equal(server.times('telemetry').length, 3);
    assert.deepEqual(server.times('kernels'), []);

    model.setDashboardVisible(false);
    model.setPanelVisible(true);
    await advance(0);
    assert.equal(server.times('kernels').length, 1);
    assert.notEqual(model.kernels, null);
  });

  it('stops asking while the browser tab is hidden, and asks again once it is shown', async () => {
    model.start();
    model.setStatusBarVisible(true);
    await advance(INTERVAL);
    const before = server.times('telemetry').length;

    setTabVisible(false);
    await advance(60000);
    // Lumino's Poll lingers for one tick before it stands by
    const hidden = server.times('telemetry').length - before;
    assert.ok(hidden <= 1, `${hidden} telemetry requests while hidden`);

    setTabVisible(true);
    const shown = Date.now();
    await advance(INTERVAL);
    const after = server.times('telemetry').filter(t => t > shown);
    assert.equal(after.length, 1);
  });

  it('backs off while the server is unreachable, says so, and recovers by itself', async () => {
    // the poll draws each wait at random up to its cap: take the longest
    mock.method(Math, 'random', () => 0.999999);
    const errors: (string | null)[] = [];
    model.stateChanged.connect(() => errors.push(model.error));
    model.start();
    model.setStatusBarVisible(true);
    await advance(INTERVAL);
    assert.equal(model.error, null);

    server.failure = { unreachable: true };
    const down = Date.now();
    await advance(120000);
    assert.equal(model.error, 'Cannot reach the Jupyter server; retrying.');
    assert.ok(errors.includes('Cannot reach the Jupyter server; retrying.'));
    assert.equal(model.loaded, true, 'the last figures stay');
    const waits = gaps(server.times('telemetry').filter(t => t > down));
    assert.ok(waits[0] > INTERVAL, `first retry after ${waits[0]} ms`);
    waits.slice(1).forEach((w, i) => assert.ok(w >= waits[i], `${waits}`));
    assert.equal(Math.max(...waits), MAX_BACKOFF);

    server.failure = null;
    const up = Date.now();
    await advance(MAX_BACKOFF + 2 * INTERVAL);
    assert.equal(model.error, null);
    assert.equal(errors[errors.length - 1], null);
    // the retry that finds it back, then the usual interval
    const back = gaps(server.times('telemetry').filter(t => t > up));
    assert.ok(back.length >= 2);
    assert.ok(
      back.every(w => w === INTERVAL),
      `${back}`
    );
  });

  it('never retries sooner than the interval, even right after a refresh', async () => {
    // the top of each draw: after an immediate tick, Lumino's range is upside down
    // and its top is 1 ms
    mock.method(Math, 'random', () => 0.999999);
    model.start();
    model.setStatusBarVisible(true);
    await advance(INTERVAL + INTERVAL / 2);
    server.failure = { unreachable: true };
    const down = Date.now();
    model.setPanelVisible(true); // opening the panel asks at once
    await advance(8 * INTERVAL);
    const asked = server.times('telemetry').filter(t => t >= down);
    assert.equal(asked[0], down, 'the refresh asked at once');
    assert.ok(asked.length >= 3, `${asked}`);
    gaps(asked).forEach(w => assert.ok(w >= INTERVAL, `retries at ${asked}`));
  });

  it("names the server's errors: the extension missing, a refusal with its reason", async () => {
    model.start();
    model.setStatusBarVisible(true);
    server.failure = { status: 404 };
    await advance(0);
    assert.match(
      model.error ?? '',
      /jupyter_gpu server extension is not enabled.*jupyter server extension enable jupyter_gpu/
    );
    assert.equal(model.loaded, false);

    server.failure = { status: 503, message: 'NVML is restarting' };
    await advance(MAX_BACKOFF);
    assert.equal(model.error, 'The server answered 503: NVML is restarting');
  });

  it('shows the seeded numbers at once, then the first poll asks for the whole history', async () => {
    const seed = parsePageTelemetry(
      JSON.stringify(server.telemetry('100')),
      100
    );
    assert.ok(seed);
    let changes = 0;
    model.stateChanged.connect(() => changes++);
    model.seed(seed);
    assert.equal(changes, 1);
    assert.equal(statusText(model).text, 'GPU 0: 50% · 1.00 / 141 GiB');
    assert.equal(server.requests.length, 0); // from the page, not a request
    assert.equal(model.polled, false); // the panel and dashboard wait for the history

    server.addSample(101);
    model.start();
    model.setStatusBarVisible(true);
    await advance(0);
    assert.deepEqual(server.sinces(), [null]); // the charts' full history, as without a seed
    assert.deepEqual(
      model.history.map(s => s.t),
      [100, 101]
    );
    assert.equal(model.telemetry?.latest?.t, 101);
    assert.ok(model.devices);
    assert.equal(model.polled, true);

    model.seed(seed); // a poll's reply is newer: an old seed never replaces it
    assert.equal(model.telemetry?.latest?.t, 101);
  });

  it('marks the seeded numbers as not current when the first poll fails', async () => {
    model.seed(
      parsePageTelemetry(JSON.stringify(server.telemetry('100')), 100)!
    );
    server.failure = { unreachable: true };
    model.start();
    model.setStatusBarVisible(true);
    await advance(0);
    const { text, title } = statusText(model);
    assert.equal(model.error, 'Cannot reach the Jupyter server; retrying.');
    assert.match(text, /50%/); // the status bar keeps them, greyed (jp-gpu-stale), and says why
    assert.match(title, /Cannot reach the Jupyter server/);
  });

  it('stops polling once disposed', async () => {
    model.start();
    model.setStatusBarVisible(true);
    await advance(0);
    model.dispose();
    const asked = server.requests.length;
    await advance(10 * INTERVAL);
    assert.equal(server.requests.length, asked);
  });
});
