import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RateLimiter, type RateDecision, type RateEpisode } from './limiter.ts';
import { MemoryRateLimitStore } from '../../limits/rate-store.ts';

function clock(start = 1_000_000) {
  const c = { now: start };
  return { c, now: () => c.now };
}

function check(limiter: RateLimiter, ip: string): RateDecision {
  const decision = limiter.check(ip);
  assert.ok(!(decision instanceof Promise));
  return decision;
}

describe('rate limiter', () => {
  it('lets `requests` through per period and blocks the next one for blockSeconds', () => {
    const { c, now } = clock();
    const limiter = new RateLimiter({ thresholds: [{ requests: 5, periodSeconds: 10 }], blockSeconds: 30 }, { now });
    for (let i = 0; i < 5; i++) assert.equal(check(limiter, '192.0.2.1').allowed, true);
    const blocked = check(limiter, '192.0.2.1');
    assert.equal(blocked.allowed, false);
    assert.ok(!blocked.allowed && blocked.started && blocked.retryAfterSeconds === 30);
    assert.equal(check(limiter, '192.0.2.2').allowed, true, 'another client has its own counters');
    c.now += 29_000;
    assert.equal(check(limiter, '192.0.2.1').allowed, false);
    c.now += 1_001;
    assert.equal(check(limiter, '192.0.2.1').allowed, true, 'after the block the client starts afresh');
    limiter.dispose();
  });

  it('estimates over a sliding window: the previous window counts in proportion to its overlap', () => {
    const { c, now } = clock(10_000 * 100); // at the start of a 10 s window
    const limiter = new RateLimiter({ thresholds: [{ requests: 10, periodSeconds: 10 }], blockSeconds: 1 }, { now });
    c.now += 9_000;
    for (let i = 0; i < 10; i++) assert.equal(check(limiter, 'a').allowed, true);
    // 3 s into the next window 70 % of the previous 10 still count: 7 + 3 new = 10 allowed, the 4th is over.
    c.now += 4_000;
    for (let i = 0; i < 3; i++) assert.equal(check(limiter, 'a').allowed, true);
    assert.equal(check(limiter, 'a').allowed, false);
    limiter.dispose();
  });

  it('applies every threshold: a burst limit and a sustained limit', () => {
    const { c, now } = clock(0);
    const limiter = new RateLimiter(
      {
        thresholds: [
          { requests: 3, periodSeconds: 1 },
          { requests: 5, periodSeconds: 60 },
        ],
        blockSeconds: 1,
      },
      { now },
    );
    for (let i = 0; i < 3; i++) assert.equal(check(limiter, 'b').allowed, true);
    const burst = check(limiter, 'b');
    assert.ok(!burst.allowed && burst.episode.threshold.periodSeconds === 1);
    c.now += 2_000;
    for (let i = 0; i < 3; i++) assert.equal(check(limiter, 'c').allowed, true);
    c.now += 2_000;
    for (let i = 0; i < 2; i++) assert.equal(check(limiter, 'c').allowed, true);
    const sustained = check(limiter, 'c');
    assert.ok(!sustained.allowed && sustained.episode.threshold.periodSeconds === 60 && sustained.episode.observedRequests === 6);
    limiter.dispose();
  });

  it('makes one episode per client and attack, with throttled updates of its counters', async () => {
    const { c, now } = clock();
    const updates: RateEpisode[] = [];
    const limiter = new RateLimiter(
      { thresholds: [{ requests: 1, periodSeconds: 10 }], blockSeconds: 2 },
      { now, onEpisodeUpdate: (e) => updates.push({ ...e }), updateIntervalMs: 20, episodeGapMs: 5_000 },
    );
    check(limiter, 'x');
    const first = check(limiter, 'x');
    assert.ok(!first.allowed && first.started);
    for (let i = 0; i < 100; i++) {
      const d = check(limiter, 'x');
      assert.ok(!d.allowed && !d.started && d.episode.eventId === first.episode.eventId);
    }
    // The block ends, the flood resumes at once: still the same episode.
    c.now += 2_001;
    check(limiter, 'x');
    const again = check(limiter, 'x');
    assert.ok(!again.allowed && !again.started && again.episode.eventId === first.episode.eventId);
    assert.equal(again.episode.blockedRequests, 102);
    await new Promise((r) => setTimeout(r, 60));
    assert.ok(updates.length >= 1 && updates.length <= 3, `a few updates, not one per request (${updates.length})`);
    assert.equal(updates.at(-1)!.blockedRequests, 102);
    // Long after the block: a new attack is a new episode.
    c.now += 60_000;
    check(limiter, 'x');
    const later = check(limiter, 'x');
    assert.ok(!later.allowed && later.started && later.episode.eventId !== first.episode.eventId);
    limiter.dispose();
  });

  it('counts the refusals of a known episode without a lookup while it holds it, and looks up once it does not', () => {
    const { c, now } = clock();
    const limiter = new RateLimiter({ thresholds: [{ requests: 1, periodSeconds: 60 }], blockSeconds: 10 }, { now, maxEpisodes: 2 });
    check(limiter, 'a');
    const blocked = check(limiter, 'a');
    assert.ok(!blocked.allowed);
    const episode = blocked.episode;
    assert.equal(limiter.refuseBlocked('a', 3, episode), episode);
    assert.equal(episode.blockedRequests, 4);
    assert.equal(limiter.refuseBlocked('b', 1, episode), undefined, "another client's episode is no hint");
    // Two more clients blocked: the table holds two, `a`'s episode is dropped (under pressure).
    for (const ip of ['b', 'c']) {
      check(limiter, ip);
      check(limiter, ip);
    }
    assert.equal(episode.held, false);
    assert.equal(limiter.refuseBlocked('a', 1, episode), undefined, 'a dropped episode is not counted');
    assert.equal(episode.blockedRequests, 4);
    const b = limiter.refuseBlocked('b', 1);
    assert.ok(b?.held);
    c.now += 10_000;
    assert.equal(limiter.refuseBlocked('b', 1, b), undefined, 'its block is over');
    limiter.dispose();
    assert.equal(b.held, false, 'a disposed limiter holds nothing');
  });

  it('keeps its counter memory bounded under a flood from millions of addresses', () => {
    const store = new MemoryRateLimitStore([1000, 60_000], 50_000);
    const limiter = new RateLimiter(
      {
        thresholds: [
          { requests: 100, periodSeconds: 1 },
          { requests: 1000, periodSeconds: 60 },
        ],
        blockSeconds: 10,
      },
      { store },
    );
    let max = 0;
    for (let i = 0; i < 2_000_000; i++) {
      limiter.check(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}#${i >> 24}`);
      if ((i & 0x3fff) === 0) max = Math.max(max, store.size);
    }
    max = Math.max(max, store.size);
    assert.ok(max <= 50_000, `at most 50,000 clients held, saw ${max}`);
    // A client that keeps sending stays counted through the churn and is still blocked.
    for (let i = 0; i < 101; i++) limiter.check('203.0.113.9');
    for (let i = 0; i < 200_000; i++) {
      limiter.check(`198.18.${(i >> 8) & 255}.${i & 255}#${i >> 16}`);
      if (i % 1000 === 0) assert.equal((limiter.check('203.0.113.9') as RateDecision).allowed, false);
    }
    assert.ok(store.size <= 50_000);
    limiter.dispose();
  });
});
