/**
 * The node's insight ingestion against a store that fails, fails half-way or hangs: the backlog
 * never holds more than its limit, WAF events past it are counted into sampled events (metric),
 * nothing is written twice or out of order, and once the store is back every request is accounted
 * for. Rate-limit episode updates reach their event whether it still waits or is written.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { InsightIngest, type InsightCounterName } from './insight-ingest.ts';
import { InsightWriteError, type InsightWrites } from '../../store/insight-writer.ts';
import type { EpisodeUpdate } from '../../store/insight-events.ts';
import { requestsOf } from '../../insight/sampler.ts';
import type { AppDdosAttackEvent, InsightEvent } from '@tps/model';
import { wafEvent, rateLimitEvent } from '../../../test/support/events.ts';

const TENANT = '00000000-0000-4000-8000-0000000000a1';
const PROXY = '00000000-0000-4000-8000-0000000000a2';

/** A store double that records what it was given, and fails while told to. */
class FlakyStore implements InsightWrites {
  readonly events: InsightEvent[] = [];
  readonly updates: EpisodeUpdate[] = [];
  /** 'up', 'down' (nothing written) or 'half' (the first half of each batch written, then a failure). */
  mode: 'up' | 'down' | 'half' = 'up';
  async write(events: readonly InsightEvent[], updates: readonly EpisodeUpdate[]): Promise<void> {
    if (this.mode === 'down') throw new InsightWriteError('store away', 0);
    if (this.mode === 'half' && events.length > 1) {
      const half = Math.floor(events.length / 2);
      this.events.push(...events.slice(0, half));
      throw new InsightWriteError('store failed half-way', half);
    }
    this.events.push(...events);
    this.updates.push(...updates);
  }
}

function ingest(store: InsightWrites, counts: Map<string, number>, backlogLimit = 50) {
  const registry = new Registry();
  const node = new InsightIngest({
    writes: store,
    wholePerWindow: 2,
    registry,
    count: (name: InsightCounterName, requests: number) => counts.set(name, (counts.get(name) ?? 0) + requests),
    logger: { error() {} },
    backlogLimit,
    samplePeriodMs: 0,
    samplerGroups: 100_000,
  });
  return { node, registry };
}

const attack = (i: number, source = i) =>
  wafEvent(TENANT, PROXY, {
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    source: { countryCode: 'DE', ip: `198.51.${Math.floor(source / 250) % 250}.${source % 250}`, port: 40000 },
  });

async function metric(registry: Registry, name: string): Promise<number> {
  const found = (await registry.getMetricsAsJSON()).find((entry) => entry.name === name);
  return Number(found?.values[0]?.value ?? 0);
}

describe('insight ingestion of an edge node', () => {
  it('holds at most its backlog while the store is away, counts the rest, and accounts for every request once it is back', async () => {
    const store = new FlakyStore();
    const counts = new Map<string, number>();
    const { node, registry } = ingest(store, counts);
    store.mode = 'down';
    let largest = 0;
    // 600 sources, a few requests each: far more whole events than the backlog takes.
    for (let i = 0; i < 3000; i++) {
      node.admit(attack(i, i % 600));
      if (i % 100 === 0) await node.flush();
      largest = Math.max(largest, node.backlog);
    }
    assert.ok(largest <= 50, `backlog reached ${largest}`);
    assert.ok((await metric(registry, 'tps_insight_backlog_shed_total')) > 0);
    assert.equal(store.events.length, 0);
    store.mode = 'up';
    await node.drain();
    assert.equal(node.backlog, 0);
    assert.equal(
      store.events.reduce((sum, event) => sum + requestsOf(event), 0) + (counts.get('tps_insight_dropped_requests_total') ?? 0),
      3000,
    );
    assert.equal(counts.get('tps_insight_dropped_requests_total') ?? 0, 0);
    assert.equal(new Set(store.events.map((event) => event.id)).size, store.events.length, 'nothing written twice');
    assert.ok(store.events.length < 3000, `${store.events.length} events for 3000 requests`);
  });

  it('writes again, in order, only what a failed write left unwritten', async () => {
    const store = new FlakyStore();
    const { node } = ingest(store, new Map(), 10_000);
    const events = Array.from({ length: 900 }, (_, i) => attack(i));
    for (const event of events) node.admit(event);
    store.mode = 'half';
    for (let i = 0; i < 12; i++) await node.flush();
    store.mode = 'up';
    await node.drain();
    assert.deepEqual(
      store.events.map((event) => event.id),
      events.map((event) => event.id),
    );
  });

  it('applies episode updates to the waiting event, or writes them after it', async () => {
    const store = new FlakyStore();
    const { node } = ingest(store, new Map());
    const first = rateLimitEvent(TENANT, PROXY);
    node.admit(first);
    const update = (blockedRequests: number) => ({
      lastBlockedAt: new Date().toISOString(),
      blockedRequests,
      blockedUntil: new Date().toISOString(),
    });
    node.updateEpisode(first.id, update(5));
    await node.flush();
    assert.equal((store.events[0] as AppDdosAttackEvent).rateLimit.blockedRequests, 5, 'changed while it waited');
    assert.equal(store.updates.length, 0);
    node.updateEpisode(first.id, update(9));
    await node.flush();
    assert.deepEqual(
      store.updates.map((u) => [u.eventId, u.update.blockedRequests]),
      [[first.id, 9]],
      'written after its event',
    );

    // A write that fails: its event waits again, and a newer update wins over the one that failed with it.
    const second = rateLimitEvent(TENANT, PROXY);
    node.admit(second);
    store.mode = 'down';
    node.updateEpisode(first.id, update(12));
    await node.flush();
    node.updateEpisode(second.id, update(3));
    store.mode = 'up';
    await node.flush();
    assert.equal((store.events.at(-1) as AppDdosAttackEvent).rateLimit.blockedRequests, 3);
    assert.deepEqual(store.updates.at(-1)!.update.blockedRequests, 12);
  });
});
