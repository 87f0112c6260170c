/**
 * How long the portal's dashboard queries take on 1,000,000 stored events of one tenant.
 *
 *   node src/store/insight-aggregates.bench.ts [events]          # SQLite in a temp folder
 *   TPS_DATABASE_URL=postgres://... node src/store/insight-aggregates.bench.ts
 *   node src/store/insight-aggregates.bench.ts 1000000 --postgres   # a throw-away local PostgreSQL cluster
 *
 * Events go through the real append path (rule rows and rollups included), spread over the last
 * 24 hours, from 5,000 source IPs, 40 countries, 2,000 paths and 60 rules, over 3 proxies.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openStore } from './index.ts';
import { dashboardRange } from './insight-aggregates.ts';
import type { InsightEvent } from '@tps/model';
import { freshPostgresDatabase } from '../../test/support/postgres.ts';

const total = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 1_000_000);
const databaseUrl = process.env.TPS_DATABASE_URL ?? (process.argv.includes('--postgres') ? await freshPostgresDatabase() : undefined);
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-bench-'));
const store = await openStore({ dataDir, databaseUrl });
const tenantId = crypto.randomUUID();
const configs = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
const now = Math.floor(Date.now() / 1000);
const countries = ['DE', 'US', 'FR', 'CN', 'BR', 'RU', 'IN', 'GB', 'NL', 'JP'];

// A skewed pick: a few keys get most events, as attacks do.
const skewed = (n: number) => Math.floor(n * Math.random() ** 3);

const started = performance.now();
for (let written = 0; written < total; ) {
  const batch: InsightEvent[] = [];
  for (let i = 0; i < 500 && written < total; i++, written++) {
    const at = new Date((now - Math.floor(Math.random() * 86_400)) * 1000).toISOString();
    const rule = 942000 + skewed(60);
    const common = {
      id: crypto.randomUUID(),
      tenantId,
      trafficConfigId: configs[written % 3]!,
      timestamp: at,
      supportId: crypto.randomBytes(16).toString('hex'),
      tpc: 'BEN',
      destinationIp: '127.0.0.2',
      source: {
        countryCode: countries[skewed(countries.length * 4) % countries.length]!,
        ip: `10.${skewed(20)}.${skewed(250)}.${written % 13}`,
        port: 40000,
      },
      request: {
        method: 'GET',
        path: `/app/${skewed(2000)}`,
        headers: ['Host: bench.example'],
        messageHeader: 'GET / HTTP/1.1\nHost: bench.example',
        statusCode: 403,
      },
    };
    batch.push(
      written % 20 === 0
        ? {
            ...common,
            type: 'APP_DDOS_ATTACK',
            action: 'BLOCKED',
            rules: [],
            rateLimit: {
              threshold: { requests: 10, periodSeconds: 1 },
              observedRequests: 11,
              blockSeconds: 60,
              firstBlockedAt: at,
              lastBlockedAt: at,
              blockedRequests: 5,
              blockedUntil: at,
            },
          }
        : {
            ...common,
            type: 'WAF_EVENT',
            action: written % 4 === 0 ? 'LOGGED' : 'BLOCKED',
            rules: [{ modSecId: rule, name: `Rule ${rule}`, matchedData: { status: 'DISABLED', value: null } }],
          },
    );
  }
  await store.insightEvents.append(batch);
  if (written % 100_000 === 0)
    process.stdout.write(`appended ${written} events (${((performance.now() - started) / 1000).toFixed(0)} s)\n`);
}
process.stdout.write(`appended ${total} events in ${((performance.now() - started) / 1000).toFixed(1)} s (${store.db.dialect})\n`);

const time = async <T>(label: string, work: () => Promise<T>): Promise<T> => {
  const t0 = performance.now();
  const result = await work();
  process.stdout.write(`${label.padEnd(48)} ${(performance.now() - t0).toFixed(0).padStart(6)} ms\n`);
  return result;
};
for (const hours of [1, 24, 24 * 7]) {
  const range = dashboardRange(now - hours * 3600, now);
  for (const configId of [undefined, configs[0]]) {
    const filter = { tenantId, type: 'WAF_EVENT' as const, from: range.from, to: range.to, configId };
    const dashboard = await time(`WAF dashboard, last ${hours} h${configId ? ', one proxy' : ''}`, () =>
      store.insightAggregates.dashboard(filter, range),
    );
    if (hours === 24 && !configId)
      process.stdout.write(`  (${dashboard.totals.events} events, ${dashboard.totals.distinctSourceIps} source IPs)\n`);
    await time(`rate-limit dashboard, last ${hours} h${configId ? ', one proxy' : ''}`, () =>
      store.insightAggregates.dashboard({ ...filter, type: 'APP_DDOS_ATTACK' }, range),
    );
    await time(`event list page, last ${hours} h${configId ? ', one proxy' : ''}`, () =>
      store.insightAggregates.events({ ...filter, size: 50 }),
    );
  }
}
const range = dashboardRange(now - 86_400, now);
await time('event list of one rule, last 24 h', () =>
  store.insightAggregates.events({ tenantId, type: 'WAF_EVENT', from: range.from, to: range.to, ruleId: 942030, size: 50 }),
);
await store.close();
fs.rmSync(dataDir, { recursive: true, force: true });
process.exit(0);
