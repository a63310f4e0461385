import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { CELLS_EVERY_POLLS, KernelCells } from '../kernelCells';
import type { Cell, CellsReply } from '../types';

function reply(kernelId: string, seqs: number[]): CellsReply {
  const cells = seqs.map(seq => ({ seq, pid: 7, start: seq }) as Cell);
  return { kernel_id: kernelId, cells } as CellsReply;
}

/** A KernelCells over a fake server that answers at once, recording what it was asked. */
function store(
  answer: (id: string) => CellsReply | Error | null = id => reply(id, [0])
) {
  const asked: string[] = [];
  let redraws = 0;
  const cells = new KernelCells(
    id => {
      asked.push(id);
      const a = answer(id);
      return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
    },
    () => redraws++
  );
  return { cells, asked, redraws: () => redraws };
}

const settle = () => new Promise(resolve => setImmediate(resolve));

describe('KernelCells', () => {
  it('asks for a kernel a chart shows at once, then once every few polls', async () => {
    const { cells, asked, redraws } = store();
    assert.equal(cells.of('k1'), null);
    for (let poll = 0; poll < 2 * CELLS_EVERY_POLLS + 1; poll++) {
      cells.poll();
      await settle();
      assert.deepEqual(cells.of('k1')?.length, 1); // the charts ask again at each redraw
    }
    assert.deepEqual(asked, ['k1', 'k1', 'k1']);
    assert.equal(redraws(), 1); // the same cells again need no redraw
  });

  it('asks for no kernel no chart showed since the last poll, and forgets it', async () => {
    const { cells, asked } = store();
    cells.poll();
    assert.deepEqual(asked, []);
    cells.of('k1');
    cells.poll();
    await settle();
    cells.poll(); // no chart asked for k1 this time
    assert.deepEqual(asked, ['k1']);
    assert.equal(cells.of('k1'), null);
  });

  it('redraws when a kernel has new cells', async () => {
    let seqs = [0];
    const { cells, redraws } = store(id => reply(id, seqs));
    for (let poll = 0; poll <= CELLS_EVERY_POLLS; poll++) {
      cells.of('k1');
      cells.poll();
      await settle();
      seqs = [0, 1];
    }
    assert.equal(redraws(), 2);
    assert.equal(cells.of('k1')?.length, 2);
  });

  it('keeps what it had when a request fails, and asks again later', async () => {
    let fail = false;
    const { cells, asked } = store(id =>
      fail ? new Error('404') : reply(id, [0])
    );
    for (let poll = 0; poll <= CELLS_EVERY_POLLS; poll++) {
      cells.of('k1');
      cells.poll();
      await settle();
      fail = true;
    }
    assert.deepEqual(asked, ['k1', 'k1']);
    assert.equal(cells.of('k1')?.length, 1);
  });
});

describe('KernelCells, a kernel the server no longer has', () => {
  it('is asked for once, and not again', async () => {
    const { cells, asked } = store(() => null);
    for (let poll = 0; poll <= 3 * CELLS_EVERY_POLLS; poll++) {
      cells.of('gone');
      cells.poll();
      await settle();
    }
    assert.deepEqual(asked, ['gone']);
    assert.equal(cells.of('gone'), null);
  });
});
