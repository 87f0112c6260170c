/**
 * Clients refused early for running past the WAF's budget: a block after `overruns` within the
 * window (not for overruns spread wider), for `blockSeconds`, one block at a time, never with 0
 * overruns, and a bounded memory that keeps blocked clients over idle ones.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BudgetOffenders, DEFAULT_BUDGET_OFFENDERS } from './budget-offenders.ts';

describe('budget offenders', () => {
  it('blocks a client after 3 overruns within 10 s, for 60 s', () => {
    let now = 1_000_000;
    const offenders = new BudgetOffenders({}, { now: () => now });
    assert.deepEqual(offenders.settings, DEFAULT_BUDGET_OFFENDERS);
    assert.equal(offenders.overrun('a'), false);
    now += 4000;
    assert.equal(offenders.overrun('a'), false);
    assert.equal(offenders.blocked('a'), undefined);
    now += 4000;
    assert.equal(offenders.overrun('a'), true, 'the third within 10 s starts a block');
    assert.equal(offenders.blocked('b'), undefined, 'only that client');
    const block = offenders.blocked('a');
    assert.ok(block);
    assert.equal(block.until, now + 60_000);
    assert.equal(offenders.overrun('a'), false, 'overruns while blocked start nothing new');
    now += 60_001;
    assert.equal(offenders.blocked('a'), undefined, 'over after 60 s');
  });

  it('does not block for overruns spread wider than the window', () => {
    let now = 0;
    const offenders = new BudgetOffenders({}, { now: () => now });
    for (let i = 0; i < 10; i++) {
      assert.equal(offenders.overrun('a'), false);
      now += 5001;
    }
  });

  it('never blocks with 0 overruns', () => {
    const offenders = new BudgetOffenders({ overruns: 0 });
    for (let i = 0; i < 10; i++) assert.equal(offenders.overrun('a'), false);
    assert.equal(offenders.blocked('a'), undefined);
  });

  it('remembers at most maxClients, forgetting idle clients before blocked ones', () => {
    let now = 0;
    const kept = new BudgetOffenders({ overruns: 2 }, { now: () => now, maxClients: 2 });
    kept.overrun('idle');
    now += 20_000;
    kept.overrun('b');
    kept.overrun('b');
    kept.overrun('c');
    assert.equal(kept.size, 2);
    assert.ok(kept.blocked('b'), 'the blocked client is kept; the idle one was forgotten');
    kept.overrun('c');
    assert.ok(kept.blocked('c'));
  });
});
