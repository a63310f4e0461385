import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { fieldColumns, memoryStack, viewRange, windowCut } from '../series';
import { deviceFor } from '../shape';
import type { Device, GpuSample, ProcessOwner, Sample } from '../types';

const GiB = 1024 ** 3;

function gpu(index: number, over: Partial<GpuSample> = {}): GpuSample {
  return {
    index,
    uuid: `GPU-${index}`,
    state: 'ok',
    error: null,
    utilization_gpu_percent: 0,
    memory_used_bytes: 1 * GiB,
    memory_total_bytes: 140 * GiB,
    processes: [],
    unsupported: {},
    ...over
  } as GpuSample;
}

function sample(t: number, gpus: GpuSample[]): Sample {
  return { t, gpus };
}

const owner = (pid: number, kernel: string, path: string): ProcessOwner => ({
  pid,
  kernel_id: kernel,
  name: 'python3',
  path
});

describe('viewRange and windowCut', () => {
  const history = [100, 200, 300, 400].map(t => sample(t, [gpu(0)]));

  it('spans the history there is, up to the window', () => {
    assert.deepEqual(viewRange(history, 400, 3600), [100, 400]);
    assert.deepEqual(viewRange(history, 400, 150), [250, 400]);
  });

  it('shows at least minSpan seconds, so one sample is not a sliver', () => {
    assert.deepEqual(viewRange([sample(400, [gpu(0)])], 400, 600), [370, 400]);
    assert.deepEqual(viewRange([], 400, 600), [370, 400]);
  });

  it('cuts the samples before the window off', () => {
    assert.deepEqual(
      windowCut(history, 250).map(s => s.t),
      [300, 400]
    );
    assert.equal(windowCut(history, 0), history);
    assert.deepEqual(windowCut(history, 401), []);
  });
});

describe('fieldColumns', () => {
  it('follows one GPU by UUID, with nulls where it was lost or unread', () => {
    const history = [
      sample(100, [gpu(0, { utilization_gpu_percent: 0 }), gpu(1)]),
      sample(101, [gpu(0, { utilization_gpu_percent: 50 })]),
      sample(102, [gpu(0, { utilization_gpu_percent: null })]),
      sample(103, [gpu(0, { state: 'lost', utilization_gpu_percent: 100 })]),
      sample(104, [gpu(0, { utilization_gpu_percent: 100 })])
    ];
    const [t, util] = fieldColumns(
      history,
      gpu(0),
      ['utilization_gpu_percent'],
      5
    );
    assert.deepEqual(t, [100, 101, 102, 103, 104]);
    assert.deepEqual(util, [0, 50, null, null, 100]);
    assert.deepEqual(
      fieldColumns(history, gpu(1), ['utilization_gpu_percent'], 5)[1],
      [0, null, null, null, null]
    );
  });

  it('follows a GPU whose place among the GPUs of a sample changes', () => {
    const util = (index: number, percent: number) =>
      gpu(index, { utilization_gpu_percent: percent });
    const history = [
      sample(100, [util(0, 1), util(1, 10)]),
      sample(101, [util(1, 11)]), // GPU 0 gone from the list
      sample(102, [util(1, 12), util(0, 2)]),
      sample(103, [util(0, 3), util(1, 13)])
    ];
    const column = (index: number) =>
      fieldColumns(history, gpu(index), ['utilization_gpu_percent'], 5)[1];
    assert.deepEqual(column(1), [10, 11, 12, 13]);
    assert.deepEqual(column(0), [1, null, 2, 3]);
  });

  it('breaks the line where samples are further apart than maxGap', () => {
    const history = [100, 101, 160, 161].map(t =>
      sample(t, [gpu(0, { utilization_gpu_percent: 7 })])
    );
    const [t, util] = fieldColumns(
      history,
      gpu(0),
      ['utilization_gpu_percent'],
      5
    );
    assert.deepEqual(t, [100, 101, 130.5, 160, 161]);
    assert.deepEqual(util, [7, 7, null, 7, 7]);
  });

  it('follows a GPU whose UUID NVML could not read by its index', () => {
    const blind = [
      sample(100, [
        gpu(0, { uuid: null, memory_used_bytes: 1 }),
        gpu(1, { uuid: null })
      ]),
      sample(101, [
        gpu(1, { uuid: null }),
        gpu(0, { uuid: null, memory_used_bytes: 2 })
      ])
    ];
    assert.deepEqual(
      fieldColumns(
        blind,
        { index: 0, uuid: null },
        ['memory_used_bytes'],
        5
      )[1],
      [1, 2]
    );
    const devices = [1, 0].map(index => ({ index, uuid: null }) as Device);
    assert.equal(deviceFor(devices, { index: 0, uuid: null }), devices[1]);
  });
});

describe('fieldColumns of GPU performance monitoring', () => {
  const gpm = ['sm_active_percent', 'tensor_active_percent'] as const;

  it('draws SM and tensor activity, null in a first sample and where unsupported', () => {
    const history = [
      // a GPU's first GPM reading has no interval to average over
      sample(100, [
        gpu(0, { sm_active_percent: null, tensor_active_percent: null })
      ]),
      sample(101, [
        gpu(0, { sm_active_percent: 96.6, tensor_active_percent: 93.7 })
      ]),
      sample(102, [
        gpu(0, {
          sm_active_percent: null,
          tensor_active_percent: null,
          unsupported: { sm_active_percent: 'needs GPU performance monitoring' }
        })
      ])
    ];
    const [t, sm, tensor] = fieldColumns(history, gpu(0), [...gpm], 5);
    assert.deepEqual(t, [100, 101, 102]);
    assert.deepEqual(sm, [null, 96.6, null]);
    assert.deepEqual(tensor, [null, 93.7, null]);
  });

  it('reads a server that predates GPM (fields absent) as gaps, not zeros', () => {
    const history = [100, 101].map(t => sample(t, [gpu(0)]));
    const [, sm, tensor] = fieldColumns(history, gpu(0), [...gpm], 5);
    assert.deepEqual(sm, [null, null]);
    assert.deepEqual(tensor, [null, null]);
  });

  it('gives NVLink rx and tx per GPU in bytes per second', () => {
    const MiB = 1024 ** 2;
    const history = [
      sample(100, [
        gpu(0, {
          nvlink_rx_bytes_per_second: 512 * MiB,
          nvlink_tx_bytes_per_second: 0
        }),
        gpu(1, {
          nvlink_rx_bytes_per_second: 0,
          nvlink_tx_bytes_per_second: 512 * MiB
        })
      ])
    ];
    const links = [
      'nvlink_rx_bytes_per_second',
      'nvlink_tx_bytes_per_second'
    ] as const;
    assert.deepEqual(fieldColumns(history, gpu(1), [...links], 5).slice(1), [
      [0],
      [512 * MiB]
    ]);
  });
});

describe('memoryStack', () => {
  const owners = [
    owner(10, 'k-small', 'course/small.ipynb'),
    owner(11, 'k-small', 'course/small.ipynb'), // a DataLoader worker of the same kernel
    owner(20, 'k-big', 'course/big.ipynb')
  ];
  const proc = (pid: number, gib: number) => ({
    pid,
    used_memory_bytes: gib * GiB
  });
  const history = [
    sample(100, [
      gpu(0, {
        memory_used_bytes: 3 * GiB,
        processes: [proc(10, 1), proc(99, 1.5)]
      })
    ]),
    sample(101, [
      gpu(0, {
        memory_used_bytes: 36 * GiB,
        processes: [proc(10, 1), proc(11, 1), proc(20, 30), proc(99, 3)]
      })
    ]),
    sample(102, [gpu(0, { state: 'lost' })])
  ];

  it('stacks notebooks (largest first), other processes, then the rest', () => {
    const stack = memoryStack(history, gpu(0), owners, 5);
    assert.deepEqual(
      stack.layers.map(l => l.label),
      [
        'course/big.ipynb',
        'course/small.ipynb',
        'other processes',
        'driver / other'
      ]
    );
    assert.deepEqual(
      stack.raw.map(col => col[0]),
      [0, 1 * GiB, 1.5 * GiB, 0.5 * GiB]
    );
    // a kernel's processes count together; what no process accounts for is the driver's
    assert.deepEqual(
      stack.raw.map(col => col[1]),
      [30 * GiB, 2 * GiB, 3 * GiB, 1 * GiB]
    );
    // each layer's top edge is the running sum; the top one is the GPU's used memory
    assert.deepEqual(
      stack.stacked.slice(1).map(col => col[1]),
      [30 * GiB, 32 * GiB, 35 * GiB, 36 * GiB]
    );
  });

  it('leaves a gap while the GPU was lost', () => {
    const stack = memoryStack(history, gpu(0), owners, 5);
    assert.deepEqual(
      stack.stacked.slice(1).map(col => col[2]),
      [null, null, null, null]
    );
  });

  it('without owners, every process is another process', () => {
    const stack = memoryStack(history, gpu(0), [], 5);
    assert.deepEqual(
      stack.layers.map(l => l.kind),
      ['processes', 'driver']
    );
    assert.equal(stack.raw[0][1], 35 * GiB);
  });

  it('never draws a negative rest when processes list more than NVML counts as used', () => {
    const over = [
      sample(100, [
        gpu(0, { memory_used_bytes: GiB, processes: [proc(99, 2)] })
      ])
    ];
    assert.equal(memoryStack(over, gpu(0), [], 5).raw[1][0], 0);
  });
});
