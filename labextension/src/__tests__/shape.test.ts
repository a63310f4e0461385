import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  allocatorMissing,
  busiestGpu,
  fillProcesses,
  gpuForUuid,
  holders,
  kernelLabel,
  memoryFraction,
  mergeHistory,
  selectGpus
} from '../shape';
import { statusText } from '../summary';
import { kernel, kernelsReply } from './replies';
import type { AllocatorFigures, GpuSample, Sample } from '../types';

const GiB = 1024 ** 3;

function gpu(index: number, over: Partial<GpuSample> = {}): GpuSample {
  return {
    index,
    uuid: `GPU-${index}`,
    mig: null,
    state: 'ok',
    error: null,
    utilization_gpu_percent: 0,
    utilization_memory_percent: 0,
    memory_used_bytes: 1 * GiB,
    memory_reserved_bytes: 0.5 * GiB,
    memory_free_bytes: 139 * GiB,
    memory_total_bytes: 140 * GiB,
    temperature_celsius: 30,
    power_watts: 70,
    power_limit_watts: 700,
    clock_sm_mhz: 345,
    clock_mem_mhz: 2619,
    pcie_rx_bytes_per_second: 0,
    pcie_tx_bytes_per_second: 0,
    unsupported: {},
    ...over
  };
}

function sample(t: number, gpus: GpuSample[]): Sample {
  return { t, gpus };
}

describe('fillProcesses', () => {
  it('carries a left-out process list forward from the sample before, GPU by GPU', () => {
    const a = [{ pid: 1, used_memory_bytes: GiB }];
    const b = [{ pid: 2, used_memory_bytes: 2 * GiB }];
    const lost = gpu(1, { state: 'lost', error: 'GPU 1 is lost' });
    const history = [
      sample(1, [gpu(0, { processes: a }), gpu(1, { processes: null })]),
      sample(2, [gpu(0), gpu(1)]),
      sample(3, [gpu(0, { processes: b }), lost]),
      sample(4, [gpu(0), gpu(1)])
    ];
    const filled = fillProcesses(history);
    assert.deepEqual(
      filled.map(s => s.gpus.map(g => g.processes)),
      [
        [a, null],
        [a, null],
        [b, undefined],
        [b, null]
      ]
    );
    assert.equal(filled[0], history[0]);
  });
});

describe('mergeHistory', () => {
  it('sorts, de-duplicates by time (newer copy wins) and trims to the window', () => {
    const a = [sample(1, [gpu(0)]), sample(2, [gpu(0)])];
    const b = [
      sample(2, [gpu(0, { utilization_gpu_percent: 50 })]),
      sample(3, [gpu(0)]),
      sample(13, [gpu(0)])
    ];
    const merged = mergeHistory(a, b, 10);
    assert.deepEqual(
      merged.map(s => s.t),
      [3, 13]
    );
    const all = mergeHistory(a, b, 100);
    assert.deepEqual(
      all.map(s => s.t),
      [1, 2, 3, 13]
    );
    assert.equal(all[1].gpus[0].utilization_gpu_percent, 50);
  });

  it('handles empty input', () => {
    assert.deepEqual(mergeHistory([], [], 10), []);
  });
});

describe('selectGpus', () => {
  it('keeps all GPUs for an empty selection, else the selected indices', () => {
    const gpus = [gpu(0), gpu(1), gpu(2)];
    assert.equal(selectGpus(gpus, []).length, 3);
    assert.deepEqual(
      selectGpus(gpus, [2, 0]).map(g => g.index),
      [0, 2]
    );
  });
});

describe('busiestGpu', () => {
  it('picks the highest utilisation, then the highest memory fraction', () => {
    const gpus = [
      gpu(0, { utilization_gpu_percent: 10 }),
      gpu(1, { utilization_gpu_percent: 90 }),
      gpu(2, { utilization_gpu_percent: 90, memory_used_bytes: 100 * GiB })
    ];
    assert.equal(busiestGpu(gpus)?.index, 2);
  });

  it('ranks GPUs without utilisation (MIG) by memory, and skips lost ones', () => {
    const gpus = [
      gpu(0, { utilization_gpu_percent: null, memory_used_bytes: 50 * GiB }),
      gpu(1, { utilization_gpu_percent: null, memory_used_bytes: 5 * GiB }),
      gpu(2, { state: 'lost', utilization_gpu_percent: 100 })
    ];
    assert.equal(busiestGpu(gpus)?.index, 0);
    const mixed = [
      gpu(0, { utilization_gpu_percent: 20 }),
      gpu(1, { utilization_gpu_percent: null, memory_used_bytes: 70 * GiB })
    ];
    assert.equal(busiestGpu(mixed)?.index, 1);
    assert.equal(busiestGpu([gpu(0, { state: 'lost' })]), null);
    assert.equal(busiestGpu([]), null);
  });

  it('computes memory fractions only when both figures are known', () => {
    assert.equal(memoryFraction(gpu(0, { memory_used_bytes: 70 * GiB })), 0.5);
    assert.equal(memoryFraction(gpu(0, { memory_total_bytes: null })), null);
    assert.equal(memoryFraction(gpu(0, { memory_total_bytes: 0 })), null);
  });
});

describe('who holds GPU memory', () => {
  it('labels kernels by notebook name, else by kernel name and id', () => {
    assert.equal(kernelLabel(kernel()), 'train.ipynb');
    assert.equal(
      kernelLabel(kernel({ path: null })),
      'python3 kernel abcdef12'
    );
  });

  it('lists kernels holding memory on the selected GPUs, largest first, then processes', () => {
    const reply = kernelsReply(
      [
        kernel({ id: 'a', gpu_memory: [] }),
        kernel({
          id: 'b',
          gpu_memory: [
            { gpu_index: 0, uuid: 'GPU-0', used_memory_bytes: GiB, pids: [1] }
          ]
        }),
        kernel({
          id: 'c',
          gpu_memory: [
            { gpu_index: 0, uuid: 'GPU-0', used_memory_bytes: GiB, pids: [2] },
            {
              gpu_index: 1,
              uuid: 'GPU-1',
              used_memory_bytes: 9 * GiB,
              pids: [2]
            }
          ]
        })
      ],
      {
        unattributed: [
          {
            pid: 7,
            gpu_index: 1,
            uuid: 'GPU-1',
            used_memory_bytes: GiB,
            user: null,
            command: null,
            reason: null
          },
          {
            pid: 8,
            gpu_index: 0,
            uuid: 'GPU-0',
            used_memory_bytes: 2 * GiB,
            user: 'x',
            command: 'python',
            reason: null
          }
        ],
        hidden_processes: 3
      }
    );
    const all = holders(reply);
    assert.deepEqual(
      all.kernels.map(k => k.id),
      ['c', 'b']
    );
    assert.deepEqual(
      all.unattributed.map(u => u.pid),
      [8, 7]
    );
    assert.equal(all.hidden, 3);
    const gpu0 = holders(reply, [0]);
    assert.deepEqual(gpu0.kernels.map(k => k.id).sort(), ['b', 'c']);
    assert.deepEqual(
      gpu0.unattributed.map(u => u.pid),
      [8]
    );
  });

  it('lists a kernel with allocator figures even while it holds no GPU memory', () => {
    const figures: AllocatorFigures = {
      version: 1,
      kernel_id: 'figures',
      pid: 4242,
      time: 1764460800,
      cuda_in_use: true,
      devices: [],
      age_seconds: 1
    };
    const reply = kernelsReply([
      kernel({
        id: 'figures',
        allocator: figures,
        allocator_state: 'ok',
        allocator_reason: null
      }),
      kernel({
        id: 'no-cuda',
        allocator: { ...figures, cuda_in_use: false },
        allocator_state: 'no_cuda',
        allocator_reason: 'PyTorch has not initialised CUDA in this kernel'
      }),
      kernel({ id: 'not-loaded' })
    ]);
    assert.deepEqual(
      holders(reply).kernels.map(k => k.id),
      ['figures']
    );
  });

  it('says a refusal, not "load it", when another user holds the kernel name', () => {
    const taken = "a file of another user holds this kernel's name";
    assert.equal(
      allocatorMissing(
        kernel({ allocator_state: 'refused', allocator_reason: taken })
      ),
      `refused: ${taken}`
    );
    assert.equal(
      allocatorMissing(
        kernel({
          allocator_state: 'stale',
          allocator_reason: 'stats file is stale'
        })
      ),
      'stats file is stale'
    );
    assert.equal(allocatorMissing(kernel()), null); // the panel says %load_ext
  });

  it('is empty when the server has no kernel figures', () => {
    assert.deepEqual(holders(null), {
      kernels: [],
      unattributed: [],
      hidden: 0
    });
  });
});

describe('status-bar summary', () => {
  const base = {
    error: null,
    loaded: true,
    available: true,
    reason: null,
    simulated: false,
    busiest: gpu(1, {
      utilization_gpu_percent: 87,
      memory_used_bytes: 30.1 * GiB
    }),
    idleHeld: 0,
    settings: { memoryUnits: 'binary' as const }
  };

  it('adds what idle kernels hold, once the server flags any', () => {
    const idle = statusText({ ...base, idleHeld: 38 * GiB });
    assert.equal(idle.text, 'GPU 1: 87% · 30.1 / 140 GiB · idle 38.0 GiB');
    assert.match(idle.title, /Idle kernels hold 38\.0 GiB of GPU memory/);
  });

  it('shows the busiest GPU with utilisation and memory', () => {
    assert.equal(statusText(base).text, 'GPU 1: 87% · 30.1 / 140 GiB');
    assert.equal(
      statusText({ ...base, simulated: true }).text,
      'GPU 1: 87% · 30.1 / 140 GiB · sim'
    );
  });

  it('says no GPU with the reason as tooltip, offline before any answer, waiting before data', () => {
    const none = statusText({
      ...base,
      available: false,
      reason: 'NVML: driver not loaded'
    });
    assert.deepEqual(none, {
      text: 'no GPU',
      title: 'NVML: driver not loaded'
    });
    assert.equal(
      statusText({ ...base, loaded: false, error: 'down' }).text,
      'GPU: offline'
    );
    assert.equal(statusText({ ...base, available: null }).text, 'GPU …');
    assert.equal(statusText({ ...base, busiest: null }).text, 'GPU: lost');
  });
});

describe('gpuForUuid', () => {
  it("matches NVML's GPU- prefixed UUIDs to PyTorch's bare ones", () => {
    const gpus = [
      gpu(0, { uuid: 'GPU-2da622ba' }),
      gpu(1, { uuid: 'GPU-D57917B3' })
    ];
    assert.equal(gpuForUuid(gpus, '2da622ba')?.index, 0);
    assert.equal(gpuForUuid(gpus, 'GPU-d57917b3')?.index, 1);
    assert.equal(gpuForUuid(gpus, 'ffff'), null);
    assert.equal(gpuForUuid(gpus, null), null);
  });
});
