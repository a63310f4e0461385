import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  gpmView,
  LAUNCH_BOUND,
  launchBound,
  launchBoundHint
} from '../activity';
import type { GpuSample, Sample } from '../types';
import { gpuSample } from './fakeServer';

const NO_GPM = 'needs GPU performance monitoring (Hopper or later)';

/** A GPU that reports GPM, idle unless `over` says otherwise. */
function gpu(index: number, over: Partial<GpuSample> = {}): GpuSample {
  return {
    ...gpuSample(index),
    utilization_gpu_percent: 0,
    sm_active_percent: 0,
    tensor_active_percent: 0,
    ...over
  };
}

/** One sample a second, from t=100: GPU 0 at `util`/`sm` (a pair per second), GPU 1 idle. */
function loop(pairs: [number | null, number | null][]): Sample[] {
  return pairs.map(([u, sm], i) => ({
    t: 100 + i,
    gpus: [
      gpu(0, { utilization_gpu_percent: u, sm_active_percent: sm }),
      gpu(1)
    ]
  }));
}

describe('gpmView', () => {
  it('charts a GPU whose server reports GPM, even before its first figures', () => {
    assert.equal(
      gpmView(gpu(0, { sm_active_percent: 12 }), 'sm_active_percent'),
      'chart'
    );
    assert.equal(
      gpmView(gpu(0, { sm_active_percent: null }), 'sm_active_percent'),
      'chart'
    );
  });

  it('gives the reason where the GPU cannot, in place of the chart', () => {
    const g = gpu(0, {
      sm_active_percent: null,
      unsupported: { sm_active_percent: NO_GPM }
    });
    assert.deepEqual(gpmView(g, 'sm_active_percent'), { reason: NO_GPM });
  });

  it('shows nothing for a server that predates GPM', () => {
    const old = gpu(0);
    delete old.sm_active_percent;
    assert.equal(gpmView(old, 'sm_active_percent'), 'none');
    assert.equal(gpmView(old, 'nvlink_rx_bytes_per_second'), 'none');
  });

  it('keeps a lost GPU its chart (its history has figures)', () => {
    const lost = {
      ...gpu(0),
      state: 'lost',
      error: 'GPU is lost'
    } as GpuSample;
    delete lost.sm_active_percent;
    assert.equal(gpmView(lost, 'sm_active_percent'), 'chart');
  });
});

describe('launchBound', () => {
  const { busy, idleSms, seconds, readings } = LAUNCH_BOUND;

  it('flags utilisation high while SM activity is low (a loop of tiny kernels)', () => {
    const history = loop(Array.from({ length: 12 }, () => [99, 0.33]));
    const lb = launchBound(history, gpu(0));
    assert.ok(lb);
    assert.equal(lb.utilisation, 99);
    assert.ok(Math.abs(lb.smActive - 0.33) < 1e-9);
    assert.equal(launchBound(history, gpu(1)), null); // idle: not busy at all
  });

  it('stays quiet for a GPU busy for real (a bf16 matmul loop)', () => {
    const history = loop(Array.from({ length: 12 }, () => [99, 96.6]));
    assert.equal(launchBound(history, gpu(0)), null);
  });

  it('holds at its thresholds: utilisation at least busy, SM active below idleSms', () => {
    const at = (u: number, sm: number) =>
      launchBound(loop(Array.from({ length: 5 }, () => [u, sm])), gpu(0));
    assert.ok(at(busy, idleSms - 0.1));
    assert.equal(at(busy - 0.1, 0), null);
    assert.equal(at(100, idleSms), null);
  });

  it('looks only at the last seconds: an earlier launch-bound stretch is over', () => {
    const before = Array.from(
      { length: 20 },
      () => [99, 0.3] as [number, number]
    );
    const now = Array.from(
      { length: seconds + 1 },
      () => [99, 90] as [number, number]
    );
    assert.equal(launchBound(loop([...before, ...now]), gpu(0)), null);
    assert.ok(launchBound(loop([...now, ...before]), gpu(0)));
  });

  it('needs enough samples with both figures: none before GPM has an interval', () => {
    const few = Array.from(
      { length: readings - 1 },
      () => [99, 0.3] as [number, number]
    );
    assert.equal(launchBound(loop([[99, null], ...few]), gpu(0)), null);
    assert.ok(launchBound(loop([[99, null], ...few, [99, 0.3]]), gpu(0)));
    const noGpm = loop(Array.from({ length: 12 }, () => [99, null]));
    assert.equal(launchBound(noGpm, gpu(0)), null);
    assert.equal(launchBound([], gpu(0)), null);
  });

  it('says what it saw, in a sentence with the figures', () => {
    const text = launchBoundHint({ utilisation: 99, smActive: 0.33 });
    assert.match(
      text,
      /^Busy but mostly idle SMs: 99% utilisation, 0\.3% SM active/
    );
    assert.match(text, /launch-bound or single-stream loop/);
  });
});
