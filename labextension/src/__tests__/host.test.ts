import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { hostMemory, hostShm } from '../host';
import type { HostReply } from '../types';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

function host(memory: Partial<HostReply['memory']> = {}): HostReply {
  return {
    version: 1,
    time: 0,
    cgroup_version: 2,
    memory: {
      limit_bytes: 16 * GiB,
      usage_bytes: 3.2 * GiB,
      oom_kills: 0,
      ...memory
    },
    cpu: { quota: 4, available: 16 },
    pids: { limit: null, current: null },
    shm: { size_bytes: 64 * MiB, free_bytes: 60 * MiB },
    kernels: [],
    unavailable: {}
  };
}

describe("the container's limits in the panel", () => {
  it('states memory against the limit, and the kills when there were any', () => {
    assert.equal(
      hostMemory(host()),
      "3.20 / 16.0 GiB of the container's memory limit"
    );
    assert.equal(
      hostMemory(host({ oom_kills: 2 })),
      "3.20 / 16.0 GiB of the container's memory limit · 2 killed by the out-of-memory killer"
    );
  });

  it('says nothing of a limit there is not, or of a server that did not answer', () => {
    assert.equal(hostMemory(host({ limit_bytes: null })), null);
    assert.equal(hostMemory(null), null);
  });

  it("states /dev/shm's room", () => {
    assert.equal(hostShm(host()), '/dev/shm: 60.0 MiB free of 64.0 MiB');
    assert.equal(hostShm(null), null);
  });
});
