import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RateLimiter, type RateDecision } from './limiter.ts';
import { MemoryRateLimitStore, type RateHit, type RateLimitStore } from '../../limits/rate-store.ts';
import {
  FailoverRateLimitStore,
  RateLimitStoreUnavailableError,
  StoreCircuit,
  type RateLimitStoreFailureMode,
  type StoreFailureSummary,
} from '../../limits/store-failover.ts';

const PERIODS = [60_000];
const POLICY = { thresholds: [{ requests: 3, periodSeconds: 60 }], blockSeconds: 30 };

/** A shared store as Redis is one: answers are promises; `down` makes every call fail, as a refused connection or a timeout does. */
class FlakyStore implements RateLimitStore {
  readonly counters = new MemoryRateLimitStore(PERIODS);
  down = false;
  calls = 0;
  hit(key: string, now: number): Promise<RateHit> {
    this.calls++;
    if (this.down) return Promise.reject(new Error('Command timed out'));
    const hit = this.counters.hit(key, now);
    return Promise.resolve({ blockedUntil: hit.blockedUntil, estimates: Array.from(hit.estimates) });
  }
  block(key: string, until: number): Promise<void> {
    this.calls++;
    if (this.down) return Promise.reject(new Error('Command timed out'));
    this.counters.block(key, until);
    return Promise.resolve();
  }
  get size(): number {
    return this.counters.size;
  }
}

function setUp(mode: RateLimitStoreFailureMode) {
  const clock = { now: 1_000_000 };
  const now = () => clock.now;
  const shared = new FlakyStore();
  const local = new MemoryRateLimitStore(PERIODS);
  const changes: boolean[] = [];
  const circuit = new StoreCircuit({ now, retryMs: 1000, onChange: (failing) => changes.push(failing) });
  const decided: RateLimitStoreFailureMode[] = [];
  const logs: StoreFailureSummary[] = [];
  const store = new FailoverRateLimitStore(shared, local, {
    mode,
    periods: PERIODS.length,
    circuit,
    onDecided: (m) => decided.push(m),
    onLog: (summary) => logs.push(summary),
    logIntervalMs: 10_000,
    now,
  });
  const limiter = new RateLimiter(POLICY, { store, now });
  const check = async (key: string): Promise<RateDecision> => limiter.check(key);
  return { clock, shared, local, circuit, changes, decided, logs, store, limiter, check };
}

describe('rate-limit store failover', () => {
  it('local: while the shared store fails, the node counts in its own counters and the limit holds', async () => {
    const t = setUp('local');
    assert.equal((await t.check('a')).allowed, true);
    assert.equal(t.shared.size, 1, 'counted in the shared store while it answers');
    t.shared.down = true;
    const decisions = [];
    for (let i = 0; i < 5; i++) decisions.push((await t.check('a')).allowed);
    // The node's own count starts at the outage: 3 requests pass, the 4th crosses the threshold.
    assert.deepEqual(decisions, [true, true, true, false, false]);
    assert.equal((await t.check('b')).allowed, true, 'a client under the limit is served');
    assert.equal(t.decided.length, 6);
    assert.ok(t.decided.every((mode) => mode === 'local'));
    assert.deepEqual(t.changes, [true], 'the circuit opened once');
    assert.equal(t.logs.length, 1, 'one log line, not one per request');
    assert.deepEqual(t.logs[0], { mode: 'local', requests: 1, cause: 'Command timed out' });
    t.limiter.dispose();
  });

  it('asks a failing store one probe at a time, and uses it again once it answers', async () => {
    const t = setUp('local');
    t.shared.down = true;
    await t.check('a');
    const callsAfterFailure = t.shared.calls;
    for (let i = 0; i < 20; i++) await t.check(`c${i}`);
    assert.equal(t.shared.calls, callsAfterFailure, 'not asked again before retryMs');
    t.clock.now += 1000;
    await t.check('d');
    assert.equal(t.shared.calls, callsAfterFailure + 1, 'one probe');
    await t.check('e');
    assert.equal(t.shared.calls, callsAfterFailure + 1, 'the failed probe waits another retryMs');
    t.shared.down = false;
    t.clock.now += 1000;
    const sharedBefore = t.shared.size;
    await t.check('f');
    assert.equal(t.circuit.failing, false);
    assert.deepEqual(t.changes, [true, false]);
    await t.check('g');
    assert.equal(t.shared.size, sharedBefore + 2, 'counted in the shared store again');
    assert.equal(t.decided.length, 23, 'every request decided by the failure mode was reported, no other');
    t.limiter.dispose();
  });

  it('logs at most once per interval, with the number of requests since the last line', async () => {
    const t = setUp('local');
    t.shared.down = true;
    for (let i = 0; i < 50; i++) await t.check(`s${i}`);
    t.clock.now += 10_000;
    for (let i = 0; i < 5; i++) await t.check(`t${i}`);
    assert.deepEqual(
      t.logs.map((line) => line.requests),
      [1, 50],
    );
    t.limiter.dispose();
  });

  it('closed: the answer is an error the phase turns into 503', async () => {
    const t = setUp('closed');
    t.shared.down = true;
    await assert.rejects(t.check('a'), RateLimitStoreUnavailableError);
    await assert.rejects(t.check('a'), /did not answer: Command timed out/);
    assert.deepEqual(t.decided, ['closed', 'closed']);
    assert.equal(t.local.size, 0);
    t.limiter.dispose();
  });

  it('open: the request counts nowhere and passes', async () => {
    const t = setUp('open');
    t.shared.down = true;
    for (let i = 0; i < 10; i++) assert.equal((await t.check('a')).allowed, true);
    assert.equal(t.local.size, 0);
    assert.deepEqual(t.decided.length, 10);
    t.limiter.dispose();
  });

  it('a block the shared store cannot write still refuses, and holds in the node', async () => {
    const t = setUp('local');
    for (let i = 0; i < 3; i++) assert.equal((await t.check('a')).allowed, true);
    // The request that crosses the threshold is counted in Redis, then the block's write fails.
    const realBlock = t.shared.block.bind(t.shared);
    t.shared.block = () => Promise.reject(new Error('Connection is closed.'));
    assert.equal((await t.check('a')).allowed, false);
    t.shared.block = realBlock;
    t.shared.down = true;
    assert.equal((await t.check('a')).allowed, false, 'the block is in the node-local counters');
    t.limiter.dispose();
  });
});
