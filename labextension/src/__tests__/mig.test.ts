/**
 * A GPU in MIG mode as the views show it: each MIG device a device of its own,
 * named after its GPU and profile, with its memory and who holds it; the GPU's
 * memory stacked by its MIG devices; and no memory counted on both.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { memoryLayers, memoryStack } from '../series';
import {
  busiestGpu,
  deviceLabel,
  gpuForUuid,
  leafDevices,
  rowLabel
} from '../shape';
import { statusText } from '../summary';
import { gpuSample } from './fakeServer';
import type { GpuSample, MigDevice, Sample } from '../types';

const GiB = 1024 ** 3;

/** A device of GPU 0's split (12.5 GiB of 140 in use, no utilisation); `over` for the rest. */
function gpu(index: number, over: Partial<GpuSample> = {}): GpuSample {
  return {
    ...gpuSample(index),
    utilization_gpu_percent: null,
    memory_used_bytes: 12.5 * GiB,
    memory_total_bytes: 140 * GiB,
    processes: null,
    ...over
  };
}

function mig(profile: string | null, gi: number): MigDevice {
  return {
    parent_index: 0,
    parent_uuid: 'GPU-0',
    gpu_instance_id: gi,
    compute_instance_id: 0,
    profile
  };
}

/** GPU 0 split into a 3g.71gb device running a notebook's process and an idle 1g.18gb. */
function split(notebookBytes = 12.5 * GiB): GpuSample[] {
  return [
    gpu(0),
    gpu(2, {
      uuid: 'MIG-aa',
      mig: mig('3g.71gb', 2),
      memory_used_bytes: notebookBytes,
      memory_total_bytes: 66.25 * GiB,
      processes: [{ pid: 564, used_memory_bytes: notebookBytes }]
    }),
    gpu(3, {
      uuid: 'MIG-bb',
      mig: mig('1g.18gb', 9),
      memory_used_bytes: 0,
      memory_total_bytes: 16.75 * GiB,
      processes: []
    }),
    gpu(1, {
      utilization_gpu_percent: 0,
      memory_used_bytes: 0.01 * GiB,
      processes: []
    })
  ];
}

const owners = [
  { pid: 564, kernel_id: 'k1', name: 'python3', path: 'course/train.ipynb' }
];

describe('deviceLabel', () => {
  it('names a GPU by its number and a MIG device by its GPU and profile', () => {
    assert.equal(deviceLabel(gpu(1)), 'GPU 1');
    assert.equal(deviceLabel(split()[2]), 'GPU 0 · MIG 1g.18gb');
    assert.equal(
      deviceLabel({ index: 3, mig: mig(null, 9) }),
      'GPU 0 · MIG GI 9'
    );
    assert.equal(deviceLabel({ index: 1 }), 'GPU 1'); // a reply of a server before MIG devices
  });

  it('names the device of a kernels-reply row, known or not', () => {
    const row = { gpu_index: 3, uuid: 'MIG-bb' };
    assert.equal(rowLabel(split(), row), 'GPU 0 · MIG 1g.18gb');
    assert.equal(rowLabel(split(), { gpu_index: 7, uuid: 'GPU-7' }), 'GPU 7');
  });

  it("finds a kernel's MIG slice by the UUID PyTorch gives it", () => {
    // the kernel writes `GPU-` before CUDA's UUID, which is the MIG device's
    assert.equal(gpuForUuid(split(), 'GPU-AA')?.index, 2);
    assert.equal(
      deviceLabel(gpuForUuid(split(), 'aa')!),
      'GPU 0 · MIG 3g.71gb'
    );
  });
});

describe('sums over devices', () => {
  it('count a GPU in MIG mode through its MIG devices, never both', () => {
    assert.deepEqual(
      leafDevices(split()).map(g => g.index),
      [2, 3, 1]
    );
    // selected alone (or with no MIG device yet), the GPU is its own leaf
    assert.deepEqual(
      leafDevices([gpu(0)]).map(g => g.index),
      [0]
    );
  });

  it('put the fullest MIG device, not its GPU, in the status bar', () => {
    const busiest = busiestGpu(split());
    assert.equal(busiest?.index, 2);
    const { text } = statusText({
      error: null,
      loaded: true,
      available: true,
      reason: null,
      simulated: false,
      busiest,
      idleHeld: 0,
      settings: { memoryUnits: 'binary' }
    });
    assert.equal(text, 'GPU 0 · MIG 3g.71gb: — · 12.5 / 66.3 GiB');
  });
});

describe('memory stacks', () => {
  const history: Sample[] = [
    { t: 1, gpus: split(4 * GiB) },
    { t: 2, gpus: split(12.5 * GiB) }
  ];

  it("stack a GPU in MIG mode by its MIG devices, the rest as the driver's", () => {
    const parent = history[1].gpus[0];
    const layers = memoryLayers(history, parent, owners);
    assert.deepEqual(
      layers.map(l => [l.kind, l.label]),
      [
        ['mig', 'GPU 0 · MIG 3g.71gb'],
        ['mig', 'GPU 0 · MIG 1g.18gb'],
        ['driver', 'driver / other']
      ]
    );
    const { raw } = memoryStack(history, parent, owners, 10, layers);
    assert.deepEqual(raw[0], [4 * GiB, 12.5 * GiB]);
    assert.deepEqual(raw[1], [0, 0]);
    // GPU 0 reports 12.5 GiB in use: beyond its devices', the driver's
    assert.deepEqual(raw[2], [8.5 * GiB, 0]);
  });

  it("stack a MIG device's own memory by notebook", () => {
    const device = history[1].gpus[1];
    const layers = memoryLayers(history, device, owners);
    assert.deepEqual(
      layers.map(l => l.label),
      ['course/train.ipynb', 'other processes', 'driver / other']
    );
    const { raw } = memoryStack(history, device, owners, 10, layers);
    assert.deepEqual(raw[0], [4 * GiB, 12.5 * GiB]);
  });
});
