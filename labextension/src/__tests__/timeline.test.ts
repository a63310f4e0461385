import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  cellLabel,
  cellMarkers,
  cellPeak,
  rankedCells,
  timelineData
} from '../timeline';
import type { Cell, CellGpu, CellsReply } from '../types';

const GiB = 1024 ** 3;

function gpu(index: number, allocated: number, change: number): CellGpu {
  return {
    index,
    uuid: `GPU-${index}`,
    allocated_bytes: allocated,
    allocated_change_bytes: change,
    peak_allocated_bytes: allocated,
    peak_at_most_bytes: null,
    reserved_change_bytes: 0,
    process_change_bytes: null
  };
}

function cell(
  seq: number,
  gpus: CellGpu[],
  count: number | null = seq + 1
): Cell {
  return {
    seq,
    pid: 100,
    execution_count: count,
    cell_id: `c${seq}`,
    start: 1000 + 10 * seq,
    end: 1005 + 10 * seq,
    wall_seconds: 5,
    outcome: 'ok',
    gpus,
    ranks: []
  };
}

describe('timelineData', () => {
  it('draws each CUDA cell from what was allocated as it started to what it left', () => {
    const data = timelineData([
      cell(0, []),
      cell(1, [gpu(0, 1 * GiB, 1 * GiB)]),
      cell(2, [gpu(0, 3 * GiB, 2 * GiB), gpu(1, GiB, GiB)])
    ]);
    assert.deepEqual(data.gpus, [0, 1]);
    assert.deepEqual(data.columns[0], [1010, 1015, 1020, 1025]);
    assert.deepEqual(data.columns[1], [0, GiB, GiB, 3 * GiB]);
    assert.deepEqual(data.columns[2], [null, null, 0, GiB]);
    assert.deepEqual(
      data.boundaries.map(b => b.label),
      ['[2]', '[3]']
    );
  });

  it('has nothing to draw when no cell used CUDA', () => {
    const data = timelineData([cell(0, [])]);
    assert.deepEqual(data.columns, [[]]);
    assert.deepEqual(data.boundaries, []);
  });
});

describe('cellMarkers', () => {
  const notebook = (path: string, colour: string, starts: number[]) => ({
    path,
    colour,
    cells: starts.map((start, i) => ({ ...cell(i, []), start }))
  });

  it('marks the cells that started within the window, oldest first, named by notebook', () => {
    const markers = cellMarkers(
      [
        notebook('a.ipynb', '#111', [900, 1000, 1500]),
        notebook('b.ipynb', '#222', [1200, 2001])
      ],
      [1000, 2000]
    );
    assert.deepEqual(markers, [
      { t: 1000, label: '[2]', title: 'a.ipynb [2]', colour: '#111' },
      { t: 1200, label: '[1]', title: 'b.ipynb [1]', colour: '#222' },
      { t: 1500, label: '[3]', title: 'a.ipynb [3]', colour: '#111' }
    ]);
  });

  it('marks cells run without CUDA too, and a cell without a number as [?]', () => {
    const unnumbered = { ...cell(0, [], null), start: 1100 };
    const markers = cellMarkers(
      [{ path: 'a.ipynb', colour: '#111', cells: [unnumbered] }],
      [1000, 2000]
    );
    assert.deepEqual(
      markers.map(m => m.title),
      ['a.ipynb [?]']
    );
  });

  it('has no markers for notebooks without cells in the window', () => {
    assert.deepEqual(
      cellMarkers([notebook('a.ipynb', '#111', [10, 20])], [1000, 2000]),
      []
    );
    assert.deepEqual(cellMarkers([], [1000, 2000]), []);
  });
});

describe('the rankings', () => {
  it('name the cells the server ranked, in its order', () => {
    const cells = [
      cell(0, [gpu(0, GiB, GiB)]),
      cell(1, [gpu(0, 5 * GiB, 4 * GiB)])
    ];
    const reply = {
      cells,
      most_left: [
        { pid: 100, seq: 1, bytes: 4 * GiB },
        { pid: 100, seq: 0, bytes: GiB },
        { pid: 999, seq: 0, bytes: GiB }
      ]
    } as unknown as CellsReply;
    const ranked = rankedCells(reply, reply.most_left);
    assert.deepEqual(
      ranked.map(r => [cellLabel(r.cell), r.bytes]),
      [
        ['[2]', 4 * GiB],
        ['[1]', GiB]
      ]
    );
  });

  it('labels a cell without a number and finds its exact peak', () => {
    const c = cell(0, [gpu(0, GiB, GiB)], null);
    assert.equal(cellLabel(c), '[?]');
    assert.equal(cellPeak(c), GiB);
    c.gpus[0].peak_allocated_bytes = null;
    c.gpus[0].peak_at_most_bytes = 2 * GiB;
    assert.equal(cellPeak(c), null);
  });
});
