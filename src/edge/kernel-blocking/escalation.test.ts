import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EscalationPolicy, THREAT_FEED_BLOCK_MS, THREAT_FEED_REFUSALS } from './escalation.ts';

describe('kernel-blocking escalation', () => {
  const thresholds = [{ requests: 10, periodSeconds: 60 }];

  it('escalates a blocked source once its refusals exceed factor x the threshold within its period, added over the workers', () => {
    let now = 1_000_000;
    const policy = new EscalationPolicy({ factor: 4, now: () => now });
    const report = (count: number, blockedUntil = 1_030_000) =>
      policy.note({ proxyId: 'p', source: '192.0.2.7', reason: 'rate-limit', count, blockedUntil }, thresholds);
    assert.equal(report(20), undefined, 'worker 1');
    assert.equal(report(20), undefined, 'worker 2: 40, not over 4 x 10');
    now += 100;
    assert.equal(report(1), 1_030_000, 'over the bar: until the block ends');
    assert.equal(report(50), undefined, 'once per block');
    assert.equal(report(40, 1_090_000), undefined, 'a new block starts from zero');
    assert.equal(report(1, 1_090_000), 1_090_000);
  });

  it('does not escalate a source that sends slowly over a long block, nor one whose block is over', () => {
    let now = 0;
    const policy = new EscalationPolicy({ factor: 4, now: () => now });
    for (let minute = 0; minute < 10; minute++) {
      now = minute * 60_000 + 1;
      assert.equal(
        policy.note({ proxyId: 'p', source: 's', reason: 'rate-limit', count: 30, blockedUntil: 3_600_000 }, thresholds),
        undefined,
      );
    }
    assert.equal(policy.note({ proxyId: 'p', source: 's', reason: 'rate-limit', count: 1000, blockedUntil: now }, thresholds), undefined);
  });

  it('escalates a threat-feed source that keeps connecting, for a while, then judges it again', () => {
    let now = 0;
    const policy = new EscalationPolicy({ factor: 4, now: () => now });
    const report = (count: number) =>
      policy.note({ proxyId: 'l4', source: '203.0.113.9', reason: 'threat-feed', count, blockedUntil: 0 }, []);
    assert.equal(report(THREAT_FEED_REFUSALS), undefined);
    assert.equal(report(1), THREAT_FEED_BLOCK_MS);
    assert.equal(report(100), undefined);
    now = THREAT_FEED_BLOCK_MS + 1;
    assert.equal(report(THREAT_FEED_REFUSALS), undefined, 'from scratch');
    assert.equal(report(1), now + THREAT_FEED_BLOCK_MS);
  });
});
