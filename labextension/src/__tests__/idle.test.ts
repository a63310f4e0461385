import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  actionDone,
  confirmation,
  CULL_EVENT,
  cullNotice,
  idleHeldBytes,
  idleLabel,
  KERNEL_ACTIONS
} from '../idle';
import type { FreeCacheReply } from '../types';
import { kernel, kernelsReply } from './replies';

const GiB = 1024 ** 3;

describe('idle kernels on GPU memory', () => {
  const holder = kernel({
    idle_seconds: 42 * 60,
    memory_bytes: 38 * GiB,
    idle_holding: true
  });

  it('marks a flagged kernel with its idle time and memory', () => {
    assert.equal(idleLabel(holder, 'binary'), 'idle 42 min · holding 38.0 GiB');
    assert.equal(idleLabel(holder, 'decimal'), 'idle 42 min · holding 40.8 GB');
    // idle but below the server's thresholds: no mark
    assert.equal(idleLabel(kernel({ memory_bytes: 38 * GiB }), 'binary'), null);
  });

  it('totals what flagged kernels hold, for the status bar', () => {
    const small = kernel({ id: 'b', memory_bytes: 2 * GiB });
    const other = kernel({
      id: 'c',
      memory_bytes: 2 * GiB,
      idle_holding: true
    });
    assert.equal(idleHeldBytes(kernelsReply([holder, small, other])), 40 * GiB);
    assert.equal(idleHeldBytes(kernelsReply([small])), 0);
    assert.equal(
      idleHeldBytes(kernelsReply([holder], { state: 'unavailable' })),
      0
    );
    assert.equal(idleHeldBytes(null), 0);
  });

  it('says in each confirmation what will be lost', () => {
    const says = (a: (typeof KERNEL_ACTIONS)[number]) =>
      confirmation(a, holder, 'binary');
    assert.match(says('free-cache').body, /Nothing is lost/);
    assert.equal(
      says('free-cache').title,
      'Free the GPU cache of train.ipynb?'
    );
    assert.match(
      says('interrupt').body,
      /KeyboardInterrupt.*Variables and tensors stay/
    );
    assert.match(
      says('restart').body,
      /Every variable and tensor .* lost, and the 38\.0 GiB/
    );
    assert.match(says('shutdown').body, /The notebook file is not changed/);
    assert.deepEqual(
      KERNEL_ACTIONS.map(a => says(a).label),
      ['Free cache', 'Interrupt', 'Restart', 'Shut down']
    );
  });

  it('reports what free cache did', () => {
    const freed: FreeCacheReply = {
      version: 1,
      kernel_id: 'k',
      cuda_in_use: true,
      freed_bytes: 20 * GiB,
      devices: [],
      reason: null
    };
    assert.equal(
      actionDone('free-cache', freed, 'binary'),
      "Freed 20.0 GiB of PyTorch's cache."
    );
    const none: FreeCacheReply = {
      ...freed,
      cuda_in_use: false,
      freed_bytes: 0,
      reason: 'no CUDA.'
    };
    assert.equal(
      actionDone('free-cache', none, 'binary'),
      'Nothing to free: no CUDA.'
    );
    assert.equal(actionDone('shutdown', null, 'binary'), 'Shut down.');
  });

  it("turns the culler's events into notifications and ignores others", () => {
    const message =
      'GPU kernel of a.ipynb was shut down after 30 min idle holding 38.0 GiB.';
    assert.equal(cullNotice({ schema_id: CULL_EVENT, message }), message);
    assert.equal(
      cullNotice({
        schema_id:
          'https://events.jupyter.org/jupyter_server/kernel_actions/v1',
        message
      }),
      null
    );
  });
});
