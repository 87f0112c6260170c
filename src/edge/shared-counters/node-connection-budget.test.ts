import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { NodeConnectionBudget } from './node-connection-budget.ts';

describe('the node-wide connection budget', () => {
  it('gives out at most its budget of places, and takes them back', () => {
    const buffer = NodeConnectionBudget.allocate(3, 2);
    const first = new NodeConnectionBudget(buffer, 0);
    const second = new NodeConnectionBudget(buffer, 1);
    assert.deepEqual([first.tryAcquire(), second.tryAcquire(), first.tryAcquire(), second.tryAcquire()], [true, true, true, false]);
    assert.deepEqual(NodeConnectionBudget.read(buffer), { open: 3, limit: 3 });
    second.release();
    assert.equal(first.tryAcquire(), true);
    assert.equal(NodeConnectionBudget.read(buffer).open, 3);
  });

  it("returns a dead worker's places", () => {
    const buffer = NodeConnectionBudget.allocate(4, 2);
    const dead = new NodeConnectionBudget(buffer, 1);
    dead.tryAcquire();
    dead.tryAcquire();
    new NodeConnectionBudget(buffer, 0).tryAcquire();
    assert.equal(NodeConnectionBudget.reclaim(buffer, 1), 2);
    assert.equal(NodeConnectionBudget.read(buffer).open, 1);
  });

  it('holds across threads racing for the last places', async () => {
    const buffer = NodeConnectionBudget.allocate(1000, 4);
    // Each thread takes places through the class itself, as a worker does.
    const moduleUrl = new URL('./node-connection-budget.ts', import.meta.url).href;
    const source = new URL(
      `data:text/javascript,${encodeURIComponent(`
        import { workerData, parentPort } from 'node:worker_threads';
        import { NodeConnectionBudget } from '${moduleUrl}';
        const budget = new NodeConnectionBudget(workerData.buffer, workerData.index);
        let got = 0;
        for (let i = 0; i < 5000; i++) if (budget.tryAcquire()) got++;
        parentPort.postMessage(got);`)}`,
    );
    const got = await Promise.all(
      [0, 1, 2, 3].map(
        (index) =>
          new Promise<number>((resolve, reject) => {
            const worker = new Worker(source, { workerData: { buffer, index } });
            worker.once('message', resolve);
            worker.once('error', reject);
          }),
      ),
    );
    assert.equal(
      got.reduce((sum, n) => sum + n, 0),
      1000,
    );
    assert.deepEqual(NodeConnectionBudget.read(buffer), { open: 1000, limit: 1000 });
  });
});
