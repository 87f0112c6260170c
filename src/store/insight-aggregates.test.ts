/**
 * Dashboard aggregations on both dialects: every number equals a count over the raw events, for
 * ranges that cut hours in two, with a proxy filter, after the backfill of events written before
 * the rollups existed, and next to the portal's users and sessions.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openStore, type Store } from './index.ts';
import { openDb } from './db.ts';
import { migrate } from './migrations.ts';
import { dashboardRange, type InsightFilter, type TopDimension } from './insight-aggregates.ts';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';
import { wafEvent, rateLimitEvent } from '../../test/support/events.ts';
import type { InsightEvent } from '@tps/model';

const HOUR = 3600;
const RULES = [
  { modSecId: 942100, name: 'SQL Injection Attack Detected via libinjection' },
  { modSecId: 941100, name: 'XSS Attack Detected via libinjection' },
  { modSecId: 930120, name: 'OS File Access Attempt' },
];

function seedEvents(tenantId: string, configs: string[], start: number, count: number): InsightEvent[] {
  const events: InsightEvent[] = [];
  for (let i = 0; i < count; i++) {
    // Spread over 60 hours (two midnights), at minutes and seconds that are not aligned.
    const at = new Date((start + ((i * 9973) % (60 * HOUR))) * 1000 + (i % 1000)).toISOString();
    const config = configs[i % configs.length]!;
    const base = i % 9 === 0 ? rateLimitEvent(tenantId, config) : wafEvent(tenantId, config);
    events.push({
      ...base,
      timestamp: at,
      ...(base.type === 'WAF_EVENT' && {
        action: i % 3 === 0 ? 'LOGGED' : 'BLOCKED',
        rules: [RULES[i % 3]!, ...(i % 4 === 0 ? [RULES[(i + 1) % 3]!] : [])].map((rule) => ({
          ...rule,
          matchedData: { status: 'DISABLED' as const, value: null },
        })),
      }),
      source: { countryCode: ['DE', 'US', 'FR'][i % 3]!, ip: `198.51.100.${i % 7}`, port: 40000 + i },
      request: { ...base.request, path: `/p${i % 5}` },
    } as InsightEvent);
  }
  return events;
}

/** What the dashboard must show, counted the slow way. */
function expected(events: InsightEvent[], filter: InsightFilter, dimension: TopDimension) {
  const inRange = events.filter(
    (event) =>
      event.tenantId === filter.tenantId &&
      event.type === filter.type &&
      (filter.configId === undefined || event.trafficConfigId === filter.configId) &&
      Date.parse(event.timestamp) >= filter.from * 1000 &&
      Date.parse(event.timestamp) < filter.to * 1000,
  );
  const counts = new Map<string, number>();
  for (const event of inRange) {
    const keys =
      dimension === 'rule'
        ? [...new Set(event.rules.map((rule) => String(rule.modSecId)))]
        : [dimension === 'ip' ? event.source.ip : dimension === 'country' ? event.source.countryCode : event.request.path];
    for (const key of keys) counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return { inRange, counts };
}

for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`insight aggregates (${kind})`, () => {
    let store: Store;
    let dataDir: string;
    const tenantId = crypto.randomUUID();
    const otherTenant = crypto.randomUUID();
    const configs = [crypto.randomUUID(), crypto.randomUUID()];
    const start = Math.floor(Date.UTC(2026, 0, 5, 9, 17, 23) / 1000);
    let events: InsightEvent[] = [];

    before(async () => {
      dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-agg-'));
      store = await openStore({ dataDir, databaseUrl: kind === 'postgres' ? await freshPostgresDatabase() : undefined });
      events = seedEvents(tenantId, configs, start, 600);
      const noise = seedEvents(otherTenant, configs, start, 100);
      for (let i = 0; i < events.length; i += 50)
        await store.insightEvents.append([...events.slice(i, i + 50), ...noise.slice(i / 6, i / 6 + 8)]);
    });
    after(async () => {
      await store.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    });

    for (const [label, from, to, configIndex] of [
      ['a range that cuts hours at both ends', start + 1234, start + 4 * HOUR + 77, undefined],
      ['a range inside one hour', start + 600, start + 1800, undefined],
      ['a range across two midnights, cut at both ends', start + 5 * HOUR + 13, start + 50 * HOUR + 7, undefined],
      ['the whole range, one proxy', start - HOUR, start + 61 * HOUR, 1],
    ] as const) {
      it(`counts exactly over ${label}`, async () => {
        const range = dashboardRange(from, to);
        for (const type of ['WAF_EVENT', 'APP_DDOS_ATTACK'] as const) {
          const filter: InsightFilter = {
            tenantId,
            type,
            from: range.from,
            to: range.to,
            configId: configIndex === undefined ? undefined : configs[configIndex],
          };
          const dashboard = await store.insightAggregates.dashboard(filter, range, 50);
          const all = expected(events, filter, 'ip');
          assert.equal(dashboard.totals.events, all.inRange.length, `${type} total`);
          assert.equal(dashboard.totals.blocked, all.inRange.filter((event) => event.action === 'BLOCKED').length);
          assert.equal(dashboard.totals.distinctSourceIps, all.counts.size);
          assert.equal(
            dashboard.series.reduce((sum, bucket) => sum + bucket.blocked + bucket.logged, 0),
            all.inRange.length,
          );
          assert.ok(dashboard.series.length <= 120 && dashboard.series.length > 0);
          for (const dimension of ['rule', 'ip', 'country', 'path'] as const) {
            if (dimension === 'rule' && type !== 'WAF_EVENT') continue;
            const { counts } = expected(events, filter, dimension);
            const shown = Object.fromEntries(dashboard.top[dimension].map((entry) => [entry.key, entry.events]));
            assert.deepEqual(shown, Object.fromEntries(counts), `${type} ${dimension}`);
          }
          if (type === 'WAF_EVENT' && dashboard.top.rule.length > 0) {
            assert.ok(
              RULES.some((rule) => rule.name === dashboard.top.rule[0]!.label),
              'rules carry their names',
            );
          }
        }
      });
    }

    it('lists events newest first, page by page, filtered by rule, IP, country and path', async () => {
      const range = dashboardRange(start - HOUR, start + 61 * HOUR);
      const filter = { tenantId, type: 'WAF_EVENT' as const, from: range.from, to: range.to };
      const seen: InsightEvent[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < 100; page++) {
        const answer = await store.insightAggregates.events({ ...filter, size: 100, cursor });
        seen.push(...answer.events);
        if (!answer.next) break;
        cursor = answer.next;
      }
      const waf = events.filter((event) => event.type === 'WAF_EVENT');
      assert.equal(seen.length, waf.length);
      assert.equal(new Set(seen.map((event) => event.id)).size, waf.length);
      const times = seen.map((event) => event.timestamp);
      assert.deepEqual(times, [...times].sort().reverse());

      const byRule = await store.insightAggregates.events({ ...filter, size: 1000, ruleId: 941100 });
      assert.equal(byRule.events.length, waf.filter((event) => event.rules.some((rule) => rule.modSecId === 941100)).length);
      const byIp = await store.insightAggregates.events({
        ...filter,
        size: 1000,
        sourceIp: '198.51.100.3',
        countryCode: 'DE',
        path: '/p1',
      });
      assert.ok(byIp.events.length > 0);
      assert.equal(
        byIp.events.length,
        waf.filter((event) => event.source.ip === '198.51.100.3' && event.source.countryCode === 'DE' && event.request.path === '/p1')
          .length,
      );
      assert.equal(await store.insightAggregates.event(otherTenant, seen[0]!.id), undefined, "another tenant's event is not found");
      assert.equal((await store.insightAggregates.event(tenantId, seen[0]!.id))?.id, seen[0]!.id);
    });

    it('throttles failed sign-ins per email and IP and keeps sessions by token hash', async () => {
      const tenant = await store.tenants.create(`t-${crypto.randomUUID()}`);
      const user = await store.portalUsers.create(tenant.id, 'Ops@Example.com', 'correct horse battery');
      assert.equal(user.email, 'ops@example.com');
      assert.equal(await store.portalUsers.authenticate('ops@example.com', 'wrong password'), undefined);
      assert.equal((await store.portalUsers.authenticate('OPS@example.com ', 'correct horse battery'))?.id, user.id);
      const now = Date.now();
      for (let i = 0; i < 5; i++) await store.portalUsers.recordFailure('ops@example.com', '127.0.0.9', now);
      assert.ok((await store.portalUsers.throttled('ops@example.com', '127.0.0.9', now)) > 14 * 60_000);
      assert.equal(await store.portalUsers.throttled('ops@example.com', '127.0.0.10', now), 0, 'another IP is not throttled');
      assert.equal(await store.portalUsers.throttled('ops@example.com', '127.0.0.9', now + 15 * 60_000 + 1), 0, 'the window passes');
      const { token, session } = await store.portalUsers.openSession(user);
      assert.equal((await store.portalUsers.session(token))?.csrfToken, session.csrfToken);
      const rows = await store.db.all<{ token_hash: string }>('SELECT token_hash FROM portal_sessions');
      assert.ok(
        rows.every((row) => row.token_hash !== token),
        'only the hash is stored',
      );
      await store.portalUsers.closeSession(token);
      assert.equal(await store.portalUsers.session(token), undefined);
    });
  });
}

for (const kind of ['sqlite', 'postgres'] as const)
  describe(`migrations backfill events stored before them (${kind})`, () => {
    it('builds rule rows, rollups, sizes and (PostgreSQL) day partitions from existing events, in their order', async () => {
      const dirs = [fs.mkdtempSync(path.join(os.tmpdir(), 'tps-agg-')), fs.mkdtempSync(path.join(os.tmpdir(), 'tps-agg-'))];
      const urls = kind === 'postgres' ? [await freshPostgresDatabase(), await freshPostgresDatabase()] : [undefined, undefined];
      try {
        const tenantId = crypto.randomUUID();
        const configId = crypto.randomUUID();
        const start = Math.floor(Date.UTC(2026, 0, 5, 9, 17, 23) / 1000);
        const events = seedEvents(tenantId, [configId], start, 200);
        // The reference: the same events appended by today's code.
        const reference = await openStore({ dataDir: dirs[0]!, databaseUrl: urls[0] });
        await reference.insightEvents.append(events);
        // A store of the first schema, its events written as the code of that time did.
        const old = await openDb({ dataDir: dirs[1]!, databaseUrl: urls[1] });
        await migrate(old, { upTo: 1 });
        for (const event of events) {
          await old.run(
            `INSERT INTO insight_events (id, tenant_id, config_id, type, action, occurred_at, source_ip, country_code, path, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
            [
              event.id,
              event.tenantId,
              event.trafficConfigId,
              event.type,
              event.action,
              event.timestamp,
              event.source.ip,
              event.source.countryCode,
              event.request.path,
              JSON.stringify(event),
            ],
          );
        }
        await old.close();
        const store = await openStore({ dataDir: dirs[1]!, databaseUrl: urls[1] });
        const range = { tenantId, type: 'WAF_EVENT' as const, from: start - HOUR, to: start + 61 * HOUR };
        assert.deepEqual(
          await store.insightAggregates.dashboard(range, dashboardRange(range.from, range.to), 50),
          await reference.insightAggregates.dashboard(range, dashboardRange(range.from, range.to), 50),
        );
        assert.deepEqual(await store.insightEvents.page({ tenantId, size: 1000 }), events, 'every event, in its order');
        const usage = async (s: Store) => (await s.db.one<{ events: number }>('SELECT SUM(events) AS events FROM insight_usage'))!.events;
        assert.equal(Number(await usage(store)), 200);
        assert.equal(Number(await usage(reference)), 200);
        // New events go after the old ones.
        const later = wafEvent(tenantId, configId);
        await store.insightEvents.append([later]);
        assert.deepEqual(
          (await store.insightEvents.page({ tenantId, after: events.at(-1)!.id, size: 10 })).map((event) => event.id),
          [later.id],
        );
        await store.close();
        await reference.close();
      } finally {
        for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  });
