import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { CULL_EVENT } from '../idle';
import { OVER_LIMIT_EVENT, overLimitNotice } from '../quota';

describe('the over-limit notice', () => {
  it("is the server's message, for its own events only", () => {
    const message =
      'The kernel of course/cupy.ipynb was interrupted: it held 3.00 GiB on GPU 1 for over 30 s.';
    assert.equal(
      overLimitNotice({ schema_id: OVER_LIMIT_EVENT, message }),
      message
    );
    assert.equal(overLimitNotice({ schema_id: CULL_EVENT, message }), null);
    assert.equal(
      overLimitNotice({ schema_id: OVER_LIMIT_EVENT, message: 3 }),
      null
    );
  });
});
