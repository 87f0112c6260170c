/**
 * Inspection no client can stall, the shares' side, through a started `tps serve` (edge on, one
 * proxy worker, two WAF threads) over real sockets:
 *
 * - a second tenant's proxy stays served (every request 200) while the first tenant's proxy is
 *   hammered with bodies slow to inspect (test/support/expensive-bodies.ts: many parameters, many
 *   multipart parts, deep JSON, long values), and none of them reaches its origin (failMode
 *   CLOSED); the same with one dense 127 KB value (a regular expression on it took seconds on V8's
 *   backtracking fallback: long values run on the linear engine, so each step stays short);
 * - a client whose requests keep running past the inspection budget is refused early by that
 *   proxy (429, Retry-After, not inspected, counted), with one WAF_EVENT for the episode, while
 *   another proxy still serves it;
 * - a response whose WAF transaction is gone (it outlived TPS_WAF_EXCHANGE_TTL_SECONDS) gets the
 *   proxy's failMode: CLOSED replaces it with 503, OPEN sends it on; counted either way.
 *
 * `fairnessTests()` registers the tests (with their own `tps serve`), for the file that runs the
 * inspection-isolation tests.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { startTps, createTenant, type Tps } from '../../support/tps.ts';
import { TenantApi } from '../../support/api-client.ts';
import { freePort } from '../../support/ports.ts';
import { waitFor } from '../../support/wait.ts';
import { ATTACK_MARK, denseValueBody, EXPENSIVE_BODY_LIMIT, type ExpensiveBody, expensiveBodies } from '../../support/expensive-bodies.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.33.1';
const ORIGIN = '127.0.33.2';
const BENIGN = '127.0.33.3';
/** Attackers: 127.0.34.1 and up. */
const attacker = (n: number) => `127.0.34.${n + 1}`;
/** The repeat offender. */
const OFFENDER = '127.0.35.1';
/** The exchange TTL of this node: a response held longer than this is past its transaction. */
const EXCHANGE_TTL_SECONDS = 2;

interface Outcome {
  status: number;
  retryAfter?: string | undefined;
  text: string;
  error?: string;
}

/** One request on its own connection from `localAddress`; a connection the proxy cuts is an outcome too. */
function send(
  url: string,
  localAddress: string,
  options: { method?: string; contentType?: string; body?: Buffer; agent?: http.Agent } = {},
): Promise<Outcome> {
  return new Promise((resolve) => {
    const request = http.request(
      url,
      {
        method: options.method ?? 'GET',
        agent: options.agent ?? false,
        localAddress,
        headers: {
          'user-agent': 'Mozilla/5.0',
          accept: '*/*',
          ...(options.contentType !== undefined && { 'content-type': options.contentType }),
        },
      },
      (response) => {
        let text = '';
        response.setEncoding('latin1');
        response.on('data', (chunk: string) => (text += chunk));
        const done = () => resolve({ status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'], text });
        response.on('end', done);
        response.on('error', done);
      },
    );
    request.setTimeout(60_000, () => request.destroy(new Error('timeout')));
    request.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, text: '', error: err.code ?? err.message }));
    request.end(options.body);
  });
}

/** The sum of a counter's samples whose labels include `labels`. */
function counter(metrics: string, name: string, labels: Record<string, string>): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (!Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

const supportIdOf = (text: string) => /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(text)?.[1];

export function fairnessTests(): void {
  describe('inspection isolation: fair shares, repeat offenders, lost responses', () => {
    let tps: Tps;
    let tenantA: TenantApi;
    let tenantB: TenantApi;
    let origin: http.Server;
    let originPort: number;
    /** Requests that reached the origin with an attack body. */
    let attacksDelivered = 0;

    before(async () => {
      origin = http.createServer((request, response) => {
        let body = '';
        request.setEncoding('latin1');
        request.on('data', (chunk: string) => (body += chunk));
        request.on('end', () => {
          if (body.includes(ATTACK_MARK)) attacksDelivered++;
          // /late answers after the WAF's transaction of the request is gone.
          const delay = request.url?.startsWith('/late') ? (EXCHANGE_TTL_SECONDS + 1) * 1000 : 0;
          setTimeout(() => {
            response.setHeader('content-type', 'text/html');
            response.end('<html>origin page</html>');
          }, delay);
        });
      });
      origin.keepAliveTimeout = 1000;
      await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
      originPort = (origin.address() as net.AddressInfo).port;
      tps = await startTps({
        env: {
          TPS_EDGE: 'true',
          TPS_EDGE_WORKERS: '1',
          TPS_WAF_THREADS: '2',
          TPS_FRONTEND_IPS: FRONTEND,
          TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
          TPS_WAF_EXCHANGE_TTL_SECONDS: String(EXCHANGE_TTL_SECONDS),
          // Well under what each expensive body costs warm (about 0.09 s and up), so that every
          // one of them runs past it on any machine.
          TPS_WAF_REQUEST_BUDGET_MS: '30',
        },
      });
      tenantA = await TenantApi.connect(tps, await createTenant(tps));
      tenantB = await TenantApi.connect(tps, await createTenant(tps));
    });

    after(async () => {
      await tps?.stop();
      origin?.closeAllConnections();
      origin?.close();
    });

    async function createProxy(api: TenantApi, waf: Record<string, unknown> = {}) {
      const port = await freePort(FRONTEND);
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'httpProxy',
          attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: ORIGIN, port: originPort }] }, waf },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.data.id as string;
      await waitFor(
        'ACTIVE',
        async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined),
        { timeoutMs: 30_000 },
      );
      // The first request starts the WAF engine (it compiles the rule set): wait for it once.
      await waitFor('the WAF ready', async () => ((await send(`http://${FRONTEND}:${port}/`, BENIGN)).status === 200 ? true : undefined), {
        timeoutMs: 60_000,
      });
      return { id, port, url: `http://${FRONTEND}:${port}` };
    }

    async function metrics(): Promise<string> {
      return (await fetch(`${tps.metricsUrl}/metrics`)).text();
    }

    /**
     * Hammers a proxy of the first tenant with `bodies` (six at a time, from 24 addresses, each
     * body in turn, for 12 s) while a visitor of the second tenant's proxy sends a page and a form
     * in turn on one keep-alive connection; asserts every visitor request was served.
     */
    async function hammerBesideSecondTenant(t: TestContext, bodies: readonly ExpensiveBody[]): Promise<void> {
      const hammered = await createProxy(tenantA, { requestBodyLimit: EXPENSIVE_BODY_LIMIT });
      const served = await createProxy(tenantB);
      const attackOutcomes = new Map<string, number>();
      const deliveredBefore = attacksDelivered;
      let attacking = true;
      const ATTACK_MS = 12_000;
      const started = performance.now();
      const attackers = Array.from({ length: 6 }, async (_, lane) => {
        for (let i = 0; performance.now() - started < ATTACK_MS; i++) {
          const body = bodies[(lane + i) % bodies.length]!;
          const outcome = await send(`${hammered.url}/form`, attacker((lane * 4 + i) % 24), {
            method: 'POST',
            contentType: body.contentType,
            body: body.body,
          });
          const key = `${body.shape}: ${outcome.error ?? outcome.status}`;
          attackOutcomes.set(key, (attackOutcomes.get(key) ?? 0) + 1);
        }
      });
      const benign: Outcome[] = [];
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      const benignRun = (async () => {
        for (let i = 0; attacking; i++) {
          benign.push(
            i % 2 === 0
              ? await send(`${served.url}/page?id=${i}`, BENIGN, { agent })
              : await send(`${served.url}/form`, BENIGN, {
                  method: 'POST',
                  agent,
                  contentType: 'application/x-www-form-urlencoded',
                  body: Buffer.from(`name=visitor${i}&comment=${'a fine day '.repeat(20)}`),
                }),
          );
        }
      })().finally(() => agent.destroy());
      await Promise.all(attackers);
      attacking = false;
      await benignRun;
      t.diagnostic(`attack: ${JSON.stringify([...attackOutcomes])}`);
      const failed = benign.filter((outcome) => outcome.status !== 200);
      const failures = new Map<string, number>();
      for (const outcome of failed) {
        const key = outcome.error ?? String(outcome.status);
        failures.set(key, (failures.get(key) ?? 0) + 1);
      }
      t.diagnostic(`second tenant: ${benign.length} requests, not 200: ${JSON.stringify([...failures])}`);
      if (failed.length > 0) {
        const why = (await metrics())
          .split('\n')
          .filter(
            (line) =>
              (line.startsWith('tps_edge_waf_uninspected_total{') && line.includes(served.id)) ||
              line.startsWith('tps_edge_waf_thread_restarts_total{'),
          );
        t.diagnostic(`why: ${why.join('; ')}`);
      }
      assert.ok(benign.length >= 10, 'the second tenant kept sending');
      assert.deepEqual(
        failed.map((outcome) => outcome.error ?? outcome.status),
        [],
        "every request to the second tenant's proxy was served",
      );
      assert.equal(attacksDelivered - deliveredBefore, 0, 'no expensive body reached the origin (failMode CLOSED)');
      for (const key of attackOutcomes.keys()) assert.doesNotMatch(key, /: 200$/, key);
    }

    it("serves a second tenant's proxy (every request 200) while the first tenant's proxy is hammered with expensive bodies", {
      timeout: 300_000,
    }, async (t) => {
      await hammerBesideSecondTenant(t, expensiveBodies());
    });

    it("serves a second tenant's proxy while the first tenant's is hammered with one dense value (each step of it within the budget)", {
      timeout: 300_000,
    }, async (t) => {
      await hammerBesideSecondTenant(t, [denseValueBody()]);
    });

    it('refuses a client that keeps exceeding the budget early (429, one event), on that proxy only', { timeout: 300_000 }, async () => {
      const proxy = await createProxy(tenantA, { requestBodyLimit: EXPENSIVE_BODY_LIMIT });
      const other = await createProxy(tenantB);
      const slow = expensiveBodies()[0]!;
      const answers: number[] = [];
      const deliveredBefore = attacksDelivered;
      let refused: Outcome | undefined;
      for (let i = 0; i < 12 && refused === undefined; i++) {
        const outcome = await send(`${proxy.url}/form`, OFFENDER, { method: 'POST', contentType: slow.contentType, body: slow.body });
        answers.push(outcome.status);
        if (outcome.status === 429) refused = outcome;
      }
      assert.ok(refused, `refused early at last; answers: ${answers.join(',')}`);
      assert.ok(answers.filter((status) => status === 503).length >= 3, `the budget overruns came first: ${answers.join(',')}`);
      assert.equal(refused.retryAfter !== undefined && Number(refused.retryAfter) > 0, true);
      const supportId = supportIdOf(refused.text);
      assert.ok(supportId);
      // Even a cheap request of that client is refused now, with the episode's support id...
      const cheap = await send(`${proxy.url}/page`, OFFENDER);
      assert.equal(cheap.status, 429);
      assert.equal(supportIdOf(cheap.text), supportId);
      // ...by that proxy only.
      assert.equal((await send(`${other.url}/page`, OFFENDER)).status, 200);
      assert.equal(attacksDelivered - deliveredBefore, 0);
      await waitFor('the refusals counted', async () => {
        return counter(await metrics(), 'tps_edge_waf_budget_offender_refused_total', { proxy: proxy.id }) >= 2 || undefined;
      });
      const events = await waitFor('the episode event', async () => {
        const all = (await tenantA.get(`${EVENTS}?filter[tenantId]=${tenantA.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1000`)).body
          .data as any[];
        const mine = all.filter(
          (event) =>
            event.relationships.trafficConfig.data.id === proxy.id &&
            event.attributes.rules.some((rule: { modSecId: number }) => rule.modSecId === 200101),
        );
        return mine.length > 0 ? mine : undefined;
      });
      assert.equal(events.length, 1, 'one event per episode');
      assert.equal(events[0].attributes.supportId, supportId);
      assert.equal(events[0].attributes.action, 'BLOCKED');
      assert.equal(events[0].attributes.request.statusCode, 429);
    });

    it('applies failMode to a response whose WAF transaction is gone: CLOSED refuses it, OPEN sends it on; counted', {
      timeout: 300_000,
    }, async () => {
      const closed = await createProxy(tenantB);
      const open = await createProxy(tenantB, { failMode: 'OPEN' });
      const refused = await send(`${closed.url}/late`, BENIGN);
      assert.equal(refused.status, 503);
      assert.doesNotMatch(refused.text, /origin page/, 'nothing of the uninspected response went out');
      assert.ok(supportIdOf(refused.text));
      const passed = await send(`${open.url}/late`, BENIGN);
      assert.equal(passed.status, 200);
      assert.match(passed.text, /origin page/);
      await waitFor('both counted', async () => {
        const text = await metrics();
        const name = 'tps_edge_waf_uninspected_total';
        return (
          (counter(text, name, { proxy: closed.id, side: 'response', outcome: 'refused' }) === 1 &&
            counter(text, name, { proxy: open.id, side: 'response', outcome: 'passed' }) === 1) ||
          undefined
        );
      });
    });
  });
}
