/**
 * Insight under a flood, through a started `tps serve` with two proxy workers, on both stores: a
 * client sends hundreds of SQL injections to a blocking proxy; few events are stored (the first of
 * each minute whole, the rest counted into sampled events), their requestCount adds up to the
 * requests blocked, the dashboards count every one of them, and a reader paging the export while
 * the flood runs sees every stored event exactly once.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startTps, createTenant, openStoreOf, type Tps, type StoreKind } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';
import { dashboardRange } from '../../src/store/insight-aggregates.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.0.85';
const ORIGIN = '127.0.0.86';
const ATTACKER = '127.0.0.87';
const REQUESTS = 600;
const WHOLE_PER_MINUTE = 5;

interface ExportedEvent {
  id: string;
  type: string;
  attributes: { requestCount?: number; source: { ip: string }; rules: { modSecId: number }[] };
}

/** `count` requests over `connections` keep-alive connections from one address; the statuses seen. */
async function flood(url: string, count: number, connections: number): Promise<number[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections, localAddress: ATTACKER });
  const statuses: number[] = [];
  let next = 0;
  const one = () =>
    new Promise<number>((resolve, reject) => {
      http
        .get(url, { agent, headers: { 'user-agent': 'Mozilla/5.0' } }, (response) => {
          response.resume();
          response.on('end', () => resolve(response.statusCode ?? 0));
        })
        .on('error', reject);
    });
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (next < count) {
        next++;
        statuses.push(await one());
      }
    }),
  );
  agent.destroy();
  return statuses;
}

for (const store of ['sqlite', 'postgres'] as StoreKind[]) {
  describe(`insight under a flood (${store} store)`, () => {
    let tps: Tps;
    let origin: http.Server;

    before(async () => {
      origin = http.createServer((_request, response) => response.end('origin'));
      await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
      tps = await startTps({
        store,
        env: {
          TPS_EDGE: 'true',
          TPS_EDGE_WORKERS: '2',
          TPS_FRONTEND_IPS: FRONTEND,
          TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
          TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE: String(WHOLE_PER_MINUTE),
        },
      });
    });
    after(async () => {
      await tps?.stop();
      origin?.close();
    });

    it('stores few events whose requestCount adds up to the requests blocked, and pages them exactly once', async () => {
      const api = await TenantApi.connect(tps, await createTenant(tps));
      const port = await freePort(FRONTEND);
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'httpProxy',
          attributes: {
            frontend: { ipv4: FRONTEND, port },
            backend: { hosts: [{ address: ORIGIN, port: (origin.address() as { port: number }).port }] },
            waf: { mode: 'BLOCKING', paranoiaLevel: 1 },
          },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.data.id as string;
      await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
        timeoutMs: 20_000,
      });
      const started = Math.floor(Date.now() / 1000);

      // A reader follows the export while the flood runs.
      const seen: string[] = [];
      let cursor: string | undefined;
      const readPage = async () => {
        const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&page[size]=50${cursor ? `&page[after]=${cursor}` : ''}`);
        assert.equal(answer.status, 200, JSON.stringify(answer.body));
        const page = answer.body.data as ExportedEvent[];
        seen.push(...page.map((event) => event.id));
        cursor = page.at(-1)?.id ?? cursor;
        return page;
      };
      let flooding = true;
      const reader = (async () => {
        while (flooding) {
          await readPage();
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      })();
      const statuses = await flood(`http://${FRONTEND}:${port}/search?id=1'%20OR%20'1'='1`, REQUESTS, 8);
      flooding = false;
      await reader;
      const blocked = statuses.filter((status) => status === 403).length;
      assert.equal(blocked, REQUESTS, `every request blocked: ${JSON.stringify(statuses.filter((status) => status !== 403).slice(0, 5))}`);

      // The sampled events come within seconds (each worker's each second, the node's every 10 s).
      const all = async () => {
        const answer = await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1000`);
        return answer.body.data as ExportedEvent[];
      };
      const stored = await waitFor(
        'requestCount to add up to the requests blocked',
        async () => {
          const events = await all();
          return events.reduce((sum, event) => sum + (event.attributes.requestCount ?? 0), 0) === blocked && events;
        },
        { timeoutMs: 40_000, intervalMs: 500 },
      );
      // Per node and minute: WHOLE_PER_MINUTE events whole, then one sample per 10 s (the flood may cross a minute).
      assert.ok(stored.length <= 2 * WHOLE_PER_MINUTE + 12, `${stored.length} events stored for ${blocked} requests`);
      assert.ok(
        stored.some((event) => (event.attributes.requestCount ?? 0) > 1),
        'sampled events stand for several requests',
      );
      assert.ok(
        stored.every((event) => event.attributes.source.ip === ATTACKER && event.attributes.rules.some((rule) => rule.modSecId === 942100)),
      );

      // The reader, continued: every stored event exactly once.
      while ((await readPage()).length > 0);
      assert.equal(new Set(seen).size, seen.length, 'no event twice');
      assert.deepEqual([...seen].sort(), stored.map((event) => event.id).sort(), 'every stored event');

      // The dashboards count requests, not stored events.
      const storeOfTps = await openStoreOf(tps);
      try {
        const to = Math.ceil(Date.now() / 1000) + 60;
        const dashboard = await storeOfTps.insightAggregates.dashboard(
          { tenantId: api.tenantId, type: 'WAF_EVENT', from: started - 120, to },
          dashboardRange(started - 120, to),
        );
        assert.equal(dashboard.totals.blocked, blocked);
        assert.equal(dashboard.top.ip.find((entry) => entry.key === ATTACKER)?.events, blocked);
        assert.equal(dashboard.top.rule.find((entry) => entry.key === '942100')?.events, blocked);
      } finally {
        await storeOfTps.close();
      }

      // The attribute is in the OpenAPI document, beside the spec's fields.
      const openapi = (await (await fetch(`${tps.url}/openapi.json`)).json()) as {
        paths: Record<string, { get: { responses: Record<string, unknown> } }>;
      };
      const exported = JSON.stringify(openapi.paths[EVENTS]!.get.responses['200']);
      assert.match(exported, /"requestCount":\{[^}]*"type":"integer"/);
      assert.match(exported, /"supportId":/);

      const metrics = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
      const value = (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(metrics)?.[1] ?? NaN);
      assert.ok(
        value('tps_insight_sampled_requests_total') >= blocked - stored.length,
        metrics
          .split('\n')
          .filter((line) => line.startsWith('tps_insight'))
          .join('\n'),
      );
      assert.equal(value('tps_insight_backlog_events'), 0);
      assert.equal(value('tps_insight_dropped_requests_total'), 0);
    });
  });
}
