import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { DEATH_EVENT, deathNotice } from '../exits';
import { CULL_EVENT } from '../idle';

describe('kernel deaths the server explains', () => {
  it('turns the kernel-died events into notifications and ignores others', () => {
    const message =
      "course/week3/train.ipynb: the kernel was killed by the out-of-memory killer: the container's limit is 16.0 GiB and it held 15.8 GiB";
    assert.equal(deathNotice({ schema_id: DEATH_EVENT, message }), message);
    assert.equal(deathNotice({ schema_id: CULL_EVENT, message }), null);
    assert.equal(deathNotice({ schema_id: DEATH_EVENT, message: 42 }), null);
  });
});
