/**
 * Retention and caps of insight events on both stores: by age (PostgreSQL drops day partitions),
 * by size oldest first, and per tenant, so that one tenant's flood never evicts another tenant's
 * history; the sizes the caps read stay equal to what is stored.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openStore, type Store } from './index.ts';
import { enforceInsightRetention, tenantTargets, tenantUsage } from './insight-retention.ts';
import { InsightEventRepository } from './insight-events.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';
import { wafEvent, rateLimitEvent } from '../../test/support/events.ts';
import type { InsightEvent } from '@tps/model';

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 2, 10, 12, 0, 0);
const CONFIG = '00000000-0000-4000-8000-0000000000c1';

function eventsAt(tenantId: string, at: number, count: number): InsightEvent[] {
  return Array.from({ length: count }, (_, i) => {
    const timestamp = new Date(at + i * 1000).toISOString();
    return i % 5 === 4 ? { ...rateLimitEvent(tenantId, CONFIG), timestamp } : wafEvent(tenantId, CONFIG, { timestamp });
  });
}

async function ids(store: Store, tenantId: string): Promise<string[]> {
  return (await store.insightEvents.page({ tenantId, size: 1000 })).map((event) => event.id);
}

/** insight_usage against a count of the rows themselves. */
async function assertUsageExact(store: Store): Promise<void> {
  const counted = await store.db.all<{ tenant_id: string; events: number; bytes: number }>(
    'SELECT tenant_id, COUNT(*) AS events, CAST(SUM(stored_bytes) AS BIGINT) AS bytes FROM insight_events GROUP BY tenant_id',
  );
  const usage = await tenantUsage(store.db);
  for (const row of counted) assert.deepEqual(usage.get(row.tenant_id), { events: Number(row.events), bytes: Number(row.bytes) });
  for (const [tenant, held] of usage) if (!counted.some((row) => row.tenant_id === tenant)) assert.deepEqual(held, { events: 0, bytes: 0 });
}

describe('tenant targets (max-min fair shares)', () => {
  it('keeps every holding under the caps whole, and cuts the largest first', () => {
    const limits = { maxBytes: 1000, tenantSharePercent: 100 };
    assert.deepEqual(
      tenantTargets(
        new Map([
          ['a', 100],
          ['b', 200],
        ]),
        limits,
      ),
      new Map([
        ['a', 100],
        ['b', 200],
      ]),
    );
    assert.deepEqual(
      tenantTargets(
        new Map([
          ['a', 100],
          ['b', 5000],
        ]),
        limits,
      ),
      new Map([
        ['a', 100],
        ['b', 900],
      ]),
    );
    assert.deepEqual(
      tenantTargets(
        new Map([
          ['a', 600],
          ['b', 5000],
        ]),
        limits,
      ),
      new Map([
        ['a', 500],
        ['b', 500],
      ]),
    );
    assert.deepEqual(
      tenantTargets(
        new Map([
          ['a', 100],
          ['b', 5000],
          ['c', 5000],
        ]),
        limits,
      ),
      new Map([
        ['a', 100],
        ['b', 450],
        ['c', 450],
      ]),
    );
  });

  it('cuts every tenant at its share of the total', () => {
    assert.deepEqual(
      tenantTargets(
        new Map([
          ['a', 100],
          ['b', 5000],
        ]),
        { maxBytes: 1000, tenantSharePercent: 40 },
      ),
      new Map([
        ['a', 100],
        ['b', 400],
      ]),
    );
  });
});

for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`insight retention (${kind})`, () => {
    let store: Store;
    let dataDir: string;

    before(async () => {
      dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-retention-'));
      store = await openStore({ dataDir, databaseUrl: kind === 'postgres' ? await freshPostgresDatabase() : undefined });
    });
    after(async () => {
      await store.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });

    it('removes the events, rule rows and rollups of days older than the retention, and keeps the rest', async () => {
      const tenantId = crypto.randomUUID();
      const old = eventsAt(tenantId, NOW - 40 * DAY, 30);
      const edge = eventsAt(tenantId, NOW - 29 * DAY, 10);
      const recent = eventsAt(tenantId, NOW - DAY, 20);
      // The recent ones as an edge node writes them: into its own row of insight_usage.
      const node = new InsightEventRepository(store.db, { writer: 'node-x' });
      for (const batch of [old, edge]) await store.insightEvents.append(batch);
      await node.append(recent);
      const report = await enforceInsightRetention(store.db, { retentionDays: 30, maxBytes: 1024 ** 3, tenantSharePercent: 100 }, NOW);
      assert.equal(report.expired, 30);
      assert.equal(report.evicted, 0);
      if (kind === 'postgres') assert.equal(report.droppedPartitions, 1, 'the old day went as a partition');
      assert.deepEqual(
        await ids(store, tenantId),
        [...edge, ...recent].map((event) => event.id),
      );
      const oldSecond = Math.floor((NOW - 40 * DAY) / 1000);
      const leftovers = await store.db.one<{ rules: number; minutes: number; hours: number; days: number }>(
        `SELECT (SELECT COUNT(*) FROM insight_event_rules WHERE tenant_id = ? AND occurred_at < ?) AS rules,
                (SELECT COUNT(*) FROM insight_minutes WHERE tenant_id = ? AND minute_s < ?) AS minutes,
                (SELECT COUNT(*) FROM insight_hourly_keys WHERE tenant_id = ? AND hour_s < ?) AS hours,
                (SELECT COUNT(*) FROM insight_daily_keys WHERE tenant_id = ? AND day_s < ?) AS days`,
        [
          tenantId,
          new Date(NOW - 35 * DAY).toISOString(),
          tenantId,
          oldSecond + 86_400,
          tenantId,
          oldSecond + 86_400,
          tenantId,
          oldSecond + 86_400,
        ],
      );
      assert.deepEqual(Object.values(leftovers!).map(Number), [0, 0, 0, 0]);
      const recentRollups = await store.db.one<{ n: number }>('SELECT COUNT(*) AS n FROM insight_minutes WHERE tenant_id = ?', [tenantId]);
      assert.ok(Number(recentRollups!.n) > 0, 'the days kept keep their rollups');
      await assertUsageExact(store);
      const writers = await store.db.all<{ writer: string }>('SELECT DISTINCT writer FROM insight_usage');
      assert.deepEqual(
        writers.map((row) => row.writer),
        [''],
        "the nodes' rows are folded into one per tenant",
      );
      // A day partition dropped is made again when an event of that day arrives.
      const late = eventsAt(tenantId, NOW - 40 * DAY, 1);
      store.insightEvents.forgetPartitions();
      await store.insightEvents.append(late);
      assert.equal((await ids(store, tenantId)).at(-1), late[0]!.id);
    });

    it('keeps the total under TPS_INSIGHT_MAX_BYTES, oldest events first', async () => {
      const tenantId = crypto.randomUUID();
      const events = eventsAt(tenantId, NOW - 2 * DAY, 400);
      for (let i = 0; i < events.length; i += 100) await store.insightEvents.append(events.slice(i, i + 100));
      const others = await tenantUsage(store.db);
      const othersBytes = [...others].filter(([tenant]) => tenant !== tenantId).reduce((sum, [, held]) => sum + held.bytes, 0);
      const mine = others.get(tenantId)!.bytes;
      // Room for the other tenants' events and about half of this one's.
      const maxBytes = othersBytes + Math.floor(mine / 2);
      const report = await enforceInsightRetention(store.db, { retentionDays: 30, maxBytes, tenantSharePercent: 100 }, NOW);
      assert.ok(report.evicted > 200 && report.evicted < 400, String(report.evicted));
      assert.ok(report.storedBytes <= maxBytes, `${report.storedBytes} > ${maxBytes}`);
      const kept = await ids(store, tenantId);
      assert.deepEqual(
        kept,
        events.slice(events.length - kept.length).map((event) => event.id),
        'the newest stay, in order',
      );
      await assertUsageExact(store);
    });

    it("holds a tenant's share against another tenant's flood", async () => {
      const quiet = crypto.randomUUID();
      const flooder = crypto.randomUUID();
      const history = eventsAt(quiet, NOW - 3 * DAY, 50);
      await store.insightEvents.append(history);
      const flood = eventsAt(flooder, NOW - 3600_000, 1000);
      for (let i = 0; i < flood.length; i += 100) await store.insightEvents.append(flood.slice(i, i + 100));
      const usage = await tenantUsage(store.db);
      const quietBytes = usage.get(quiet)!.bytes;
      const floodBytes = usage.get(flooder)!.bytes;
      const everything = [...usage.values()].reduce((sum, held) => sum + held.bytes, 0);
      // The flood alone is past the cap, and past the flooder's share (40 %) of it.
      const maxBytes = everything - Math.floor(floodBytes / 2);
      const limits = { retentionDays: 30, maxBytes, tenantSharePercent: 40 };
      await enforceInsightRetention(store.db, limits, NOW);
      assert.deepEqual(
        await ids(store, quiet),
        history.map((event) => event.id),
        "the quiet tenant's history is whole",
      );
      const after = await tenantUsage(store.db);
      assert.equal(after.get(quiet)!.bytes, quietBytes);
      assert.ok(after.get(flooder)!.bytes <= (maxBytes * 40) / 100, 'the flooder is cut to its share');
      const floodLeft = await ids(store, flooder);
      assert.ok(floodLeft.length > 0 && floodLeft.length < flood.length);
      assert.deepEqual(
        floodLeft,
        flood.slice(flood.length - floodLeft.length).map((event) => event.id),
        "the flood's newest events stay",
      );
      await assertUsageExact(store);
    });
  });
}
