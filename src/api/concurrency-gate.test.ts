import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConcurrencyGate, GateFullError } from './concurrency-gate.ts';

describe('concurrency gate', () => {
  it('runs at most `concurrency` tasks at once, queues `maxWaiting`, refuses the rest at once', async () => {
    const gate = new ConcurrencyGate(2, 3);
    let active = 0;
    let peak = 0;
    const release: (() => void)[] = [];
    const task = () =>
      new Promise<string>((resolve) => {
        active++;
        peak = Math.max(peak, active);
        release.push(() => {
          active--;
          resolve('done');
        });
      });
    const outcomes = Array.from({ length: 8 }, () =>
      gate.run(task).then(
        (value) => value,
        (error: unknown) => error,
      ),
    );
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(gate.running, 2);
    assert.equal(gate.waiting, 3);
    while (release.length > 0 || active > 0) {
      release.shift()?.();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const settled = await Promise.all(outcomes);
    assert.equal(settled.filter((value) => value === 'done').length, 5);
    assert.equal(settled.filter((value) => value instanceof GateFullError).length, 3);
    assert.equal(peak, 2);
    assert.equal(gate.running, 0);
  });

  it('frees the turn of a task that fails', async () => {
    const gate = new ConcurrencyGate(1, 0);
    await assert.rejects(
      gate.run(async () => Promise.reject(new Error('boom'))),
      /boom/,
    );
    assert.equal(await gate.run(async () => 'next'), 'next');
  });
});
