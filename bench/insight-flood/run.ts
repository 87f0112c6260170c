/**
 * Insight under a flood: a blocked attack at the node's full rate, against the real `tps serve`
 * (and, on PostgreSQL, a second edge node, `tps edge`, on the same store and port), with wrk.
 * Per store it prints:
 *
 *   blocked          requests the WAF blocked (as the nodes' tps_edge_http_requests_total{answered_by="waf",status_class="4xx"} count them)
 *   events           insight events stored, and the requests their requestCount adds up to
 *   B/event          pages the event tables and their indexes hold per stored event (SQLite's dbstat,
 *                    PostgreSQL's pg_total_relation_size), and the store's own estimate (stored_bytes)
 *   growth           store growth (SQLite: the file and its WAL; PostgreSQL: pg_database_size), in
 *                    total and per million blocked requests
 *   API p50/p99/max  GET /traffic-configs during the flood, one probe started every 100 ms
 *   dashboards       the requests the dashboards count (rollups) against the requests blocked
 *   export           every stored event paged exactly once through the export, requestCount summed
 *
 * Targets (2 cores): growth under 50 MB per million blocked requests, API p99 under 100 ms and max
 * under 1 s during the flood, dashboards equal to the requests blocked.
 *
 *   node bench/insight-flood/run.ts
 *   BENCH_SECONDS=10 BENCH_STORES=sqlite node bench/insight-flood/run.ts     (a short run, one store)
 *   knobs: BENCH_SECONDS (60), BENCH_STORES (sqlite,postgres), BENCH_CONNECTIONS (64), BENCH_WRK_THREADS (1)
 *
 * Installs wrk from Debian when absent (as root). PostgreSQL: Debian's postgresql, started as in the
 * tests (test/support/postgres.ts). Loopback only: 127.0.0.88 front end, .89 origin.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import pg from 'pg';
import { startTps, createTenant, openStoreOf, REPO_ROOT, type Tps, type StoreKind } from '../../test/support/tps.ts';
import { TenantApi } from '../../test/support/api-client.ts';
import { waitFor } from '../../test/support/wait.ts';
import { dashboardRange } from '../../src/store/insight-aggregates.ts';
import { hasCommand, installDebianPackages } from '../support/debian.ts';
import { freePort } from '../support/net.ts';
import { fixed, formatTable } from '../support/table.ts';
import { runWrk } from '../support/wrk.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const STORES = (process.env.BENCH_STORES ?? 'sqlite,postgres').split(',') as StoreKind[];
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const WRK_THREADS = Number(process.env.BENCH_WRK_THREADS ?? 1);
const FRONTEND = '127.0.0.88';
const ORIGIN = '127.0.0.89';
const PROBE_EVERY_MS = 100;
/** Probes in flight at most (a stalled API must not pile up sockets). */
const PROBES_IN_FLIGHT = 50;
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';

interface Result {
  store: string;
  nodes: number;
  blocked: number;
  wrkRps: number;
  events: number;
  eventRequests: number;
  growthBytes: number;
  /** Bytes of the event tables and their indexes (all tenants) and the events they hold. */
  tableBytes: number;
  tableEvents: number;
  estimatedBytesPerEvent: number;
  probes: number[];
  probesSkipped: number;
  dashboardBlocked: number;
  exported: number;
  exportedUnique: number;
  exportedRequests: number;
}

function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Requests the WAF answered with a 4xx (403 blocks, in this benchmark), from a node's /metrics (its workers report once a second). */
async function blockedOn(metricsUrl: string, proxyId: string): Promise<number> {
  const text = await (await fetch(`${metricsUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (
      !line.startsWith('tps_edge_http_requests_total{') ||
      !line.includes(`proxy="${proxyId}"`) ||
      !line.includes('answered_by="waf"') ||
      !line.includes('status_class="4xx"')
    )
      continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

async function storeSize(tps: Tps): Promise<number> {
  if (tps.store === 'sqlite') {
    const file = path.join(tps.env.TPS_DATA_DIR!, 'tps.sqlite');
    return [file, `${file}-wal`].reduce((sum, name) => sum + (fs.existsSync(name) ? fs.statSync(name).size : 0), 0);
  }
  const client = new pg.Client(tps.env.TPS_DATABASE_URL);
  await client.connect();
  try {
    const { rows } = await client.query<{ size: string }>('SELECT pg_database_size(current_database()) AS size');
    return Number(rows[0]!.size);
  } finally {
    await client.end();
  }
}

/** What the event tables and their indexes take in the store, and how many events they hold. */
async function eventTables(store: Awaited<ReturnType<typeof openStoreOf>>): Promise<{ bytes: number; events: number }> {
  const sql =
    store.db.dialect === 'sqlite'
      ? `SELECT SUM(pgsize) AS bytes FROM dbstat d JOIN sqlite_schema s ON s.name = d.name WHERE s.tbl_name IN ('insight_events', 'insight_event_rules')`
      : `SELECT (SELECT SUM(pg_total_relation_size(relid)) FROM pg_partition_tree('insight_events'))
              + (SELECT SUM(pg_total_relation_size(relid)) FROM pg_partition_tree('insight_event_rules')) AS bytes`;
  const bytes = Number((await store.db.one<{ bytes: number }>(sql))?.bytes ?? 0);
  const events = Number((await store.db.one<{ n: number }>('SELECT COUNT(*) AS n FROM insight_events'))?.n ?? 0);
  return { bytes, events };
}

/** `tps edge` on the same store and settings: a second edge node. */
async function startEdgeNode(tps: Tps): Promise<{ child: ChildProcess; metricsUrl: string }> {
  const child = spawn(process.execPath, [path.join(REPO_ROOT, 'bin/tps.js'), 'edge'], {
    env: { ...process.env, ...tps.env, TPS_NODE_ID: 'bench-second-node', TPS_METRICS_LISTEN: '127.0.0.1:0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const line = await waitFor(
    'the second edge node',
    async () => output.split('\n').find((candidate) => candidate.includes('"tps edge ready"')),
    {
      timeoutMs: 30_000,
    },
  );
  return { child, metricsUrl: (JSON.parse(line) as { metricsUrl: string }).metricsUrl };
}

async function runStore(kind: StoreKind, originPort: number): Promise<Result> {
  const tps = await startTps({
    store: kind,
    env: {
      TPS_EDGE: 'true',
      TPS_FRONTEND_IPS: FRONTEND,
      TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      // The probes and the export's pages are API calls too.
      TPS_API_RATE_LIMIT_PER_MINUTE: '1000000',
    },
  });
  const second = kind === 'postgres' ? await startEdgeNode(tps) : undefined;
  try {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: originPort }] },
          waf: { mode: 'BLOCKING', paranoiaLevel: 1 },
        },
      },
    });
    if (created.status !== 201) throw new Error(`proxy not created: ${JSON.stringify(created.body)}`);
    const proxyId = created.body.data.id as string;
    await waitFor('ACTIVE on every node', async () => (await api.get(`${CONFIGS}/${proxyId}`)).body.data.attributes.status === 'ACTIVE', {
      timeoutMs: 30_000,
    });
    const sizeBefore = await storeSize(tps);
    const started = Math.floor(Date.now() / 1000);

    // The API probe: one GET started every 100 ms while the flood runs.
    const probes: number[] = [];
    let inFlight = 0;
    let probesSkipped = 0;
    const probe = setInterval(() => {
      if (inFlight >= PROBES_IN_FLIGHT) {
        probesSkipped++;
        return;
      }
      inFlight++;
      const at = performance.now();
      void api
        .get(CONFIGS)
        .then((answer) => {
          if (answer.status === 200) probes.push(performance.now() - at);
        })
        .finally(() => inFlight--);
    }, PROBE_EVERY_MS);
    const wrk = await runWrk({
      url: `http://${FRONTEND}:${port}/search?id=1'%20OR%20'1'='1`,
      seconds: SECONDS,
      connections: CONNECTIONS,
      threads: WRK_THREADS,
      headers: ['User-Agent: Mozilla/5.0'],
    });
    clearInterval(probe);
    await waitFor('the last probes', async () => inFlight === 0, { timeoutMs: 30_000 });

    // Samples go out within seconds of the flood's end; then every number must settle.
    const metricsUrls = [tps.metricsUrl, ...(second ? [second.metricsUrl] : [])];
    const blockedNow = async () => (await Promise.all(metricsUrls.map((url) => blockedOn(url, proxyId)))).reduce((a, b) => a + b, 0);
    const storeOfTps = await openStoreOf(tps);
    let blocked = 0;
    let dashboardBlocked = 0;
    try {
      const dashboard = async () => {
        const to = Math.ceil(Date.now() / 1000) + 60;
        return (
          await storeOfTps.insightAggregates.dashboard(
            { tenantId: api.tenantId, type: 'WAF_EVENT', from: started - 120, to },
            dashboardRange(started - 120, to),
          )
        ).totals.blocked;
      };
      await waitFor(
        'the dashboards to count every blocked request',
        async () => {
          blocked = await blockedNow();
          dashboardBlocked = await dashboard();
          return blocked > 0 && dashboardBlocked === blocked;
        },
        { timeoutMs: 60_000, intervalMs: 1_000 },
      ).catch((error: Error) => console.log(`  ${error.message} (blocked ${blocked}, dashboards ${dashboardBlocked})`));
      const stored = (await storeOfTps.db.one<{ events: number; requests: number; bytes: number }>(
        'SELECT COUNT(*) AS events, SUM(requests) AS requests, AVG(stored_bytes) AS bytes FROM insight_events WHERE tenant_id = ?',
        [api.tenantId],
      ))!;
      const sizeAfter = await storeSize(tps);
      const tables = await eventTables(storeOfTps);

      // The export, page by page: every stored event once.
      const ids: string[] = [];
      let exportedRequests = 0;
      let cursor: string | undefined;
      for (;;) {
        const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=1000${cursor ? `&page[after]=${cursor}` : ''}`);
        const page = answer.body.data as { id: string; attributes: { requestCount?: number } }[];
        if (page.length === 0) break;
        ids.push(...page.map((event) => event.id));
        exportedRequests += page.reduce((sum, event) => sum + (event.attributes.requestCount ?? 1), 0);
        cursor = page.at(-1)!.id;
      }
      return {
        store: kind,
        nodes: metricsUrls.length,
        blocked,
        wrkRps: wrk.rps,
        events: Number(stored.events),
        eventRequests: Number(stored.requests ?? 0),
        growthBytes: sizeAfter - sizeBefore,
        tableBytes: tables.bytes,
        tableEvents: tables.events,
        estimatedBytesPerEvent: Number(stored.bytes ?? 0),
        probes,
        probesSkipped,
        dashboardBlocked,
        exported: ids.length,
        exportedUnique: new Set(ids).size,
        exportedRequests,
      };
    } finally {
      await storeOfTps.close();
    }
  } finally {
    second?.child.kill('SIGTERM');
    await tps.stop();
  }
}

if (!hasCommand('wrk')) installDebianPackages(['wrk']);
const origin = http.createServer((_request, response) => response.end('origin\n'));
await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
const originPort = (origin.address() as { port: number }).port;
console.log(`insight under a flood: ${SECONDS} s of blocked SQL injections per store, wrk -t${WRK_THREADS} -c${CONNECTIONS}`);
const results: Result[] = [];
try {
  for (const kind of STORES) {
    console.log(`- ${kind}...`);
    results.push(await runStore(kind, originPort));
  }
} finally {
  origin.close();
}

const mb = (bytes: number) => bytes / 1024 / 1024;
console.log('');
console.log(
  formatTable(
    [
      'store',
      'nodes',
      'blocked',
      'req/s',
      'events',
      'requests in events',
      'growth MB',
      'B/event',
      'est. B/event',
      'MB per 1M blocked',
      'API p50 ms',
      'p99 ms',
      'max ms',
      'probes',
      'dashboards',
      'exported (unique)',
      'export requests',
    ],
    results.map((r) => [
      r.store,
      String(r.nodes),
      String(r.blocked),
      fixed(r.wrkRps, 0),
      String(r.events),
      String(r.eventRequests),
      fixed(mb(r.growthBytes), 2),
      fixed(r.tableBytes / r.tableEvents, 0),
      fixed(r.estimatedBytesPerEvent, 0),
      fixed((mb(r.growthBytes) * 1e6) / r.blocked, 2),
      fixed(percentile(r.probes, 50), 1),
      fixed(percentile(r.probes, 99), 1),
      fixed(Math.max(...r.probes), 1),
      `${r.probes.length}${r.probesSkipped ? ` (+${r.probesSkipped} skipped)` : ''}`,
      `${r.dashboardBlocked}${r.dashboardBlocked === r.blocked ? ' =' : ' !='}`,
      `${r.exported} (${r.exportedUnique})${r.exported === r.events && r.exportedUnique === r.events ? ' =' : ' !='}`,
      `${r.exportedRequests}${r.exportedRequests === r.blocked ? ' =' : ' !='}`,
    ]),
  ),
);
console.log('\n"=": equal to the requests blocked (dashboards, export requests) or to the events stored (exported, each once).');
process.exit(0);
