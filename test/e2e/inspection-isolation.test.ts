/**
 * Inspection that no client can stall, through a started `tps serve` over real sockets: a client
 * whose request bodies are legal, under every size limit, and slow to inspect (many parameters,
 * many multipart parts, deep JSON, long values that many transformations touch) gets them refused
 * (503, waf.failMode CLOSED: their inspection ended at the budget) or blocked, none reaches the
 * origin, while benign keep-alive clients beside it never see a failure and the WAF thread is
 * never restarted. And each input limit of a proxy refuses at its boundary and passes just below.
 *
 * The budget is lowered (TPS_WAF_REQUEST_BUDGET_MS=30) so that every expensive body takes well
 * over it without the cooperative check (measured alone, in process, warm: about 0.09 to 0.9 s
 * each at paranoia 1; the engine's own speed sets that floor, so a faster engine asks for a lower
 * budget here), while a benign request takes a millisecond or two; and one WAF thread serves
 * everyone, so expensive and benign requests share it.
 *
 * Other parts of the same acceptance live in `inspection-isolation/*.ts` beside this file: the
 * fair shares between tenants, the early refusal of repeat offenders and the response side's
 * failMode (`fairnessTests()`, with a `tps serve` of its own).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';
import { fairnessTests } from './inspection-isolation/fairness.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.0.180';
const ORIGIN = '127.0.0.181';
/** The attacker and the benign clients are different clients (an address each). */
const ATTACKER = '127.0.0.182';
const BENIGN = '127.0.0.183';
const BUDGET_MS = 30;
/** The largest request body a proxy may have the WAF inspect (MAX_WAF_REQUEST_BODY_LIMIT). */
const BODY_LIMIT = 1024 * 1024;

interface Shape {
  readonly name: string;
  readonly contentType: string;
  readonly body: Buffer;
}

const CHUNK = 'a<x y="1"> select from -- ';

/** 999 arguments (one under ModSecurity's limit), each a value with markup and SQL words. */
function manyParameters(): Shape {
  const value = encodeURIComponent(CHUNK.repeat(20));
  const body = Array.from({ length: 999 }, (_, i) => `field${i}=${value}`).join('&');
  return { name: 'many parameters', contentType: 'application/x-www-form-urlencoded', body: Buffer.from(body) };
}

/** 990 parts of a multipart/form-data body. */
function manyParts(): Shape {
  let body = '';
  for (let i = 0; i < 990; i++) body += `--b0undary\r\nContent-Disposition: form-data; name="part${i}"\r\n\r\n${CHUNK.repeat(30)}\r\n`;
  return {
    name: 'many multipart parts',
    contentType: 'multipart/form-data; boundary=b0undary',
    body: Buffer.from(`${body}--b0undary--\r\n`),
  };
}

/** JSON nested 500 deep (under the 512 limit) around 990 strings: long argument names, many values. */
function deepJson(): Shape {
  const leaves = Array.from({ length: 990 }, (_, i) => `"v${i} ${'select <b> '.repeat(80)}"`).join(',');
  return { name: 'deep JSON', contentType: 'application/json', body: Buffer.from(`${'{"a":'.repeat(500)}[${leaves}]${'}'.repeat(500)}`) };
}

/** A few values of ~100 KB (under the 128 KiB value limit) that every transformation chain changes. */
function longValues(): Shape {
  const value = encodeURIComponent('%2541<sc ript>&#x41;/**/ union '.repeat(3300).slice(0, 100_000));
  const body = Array.from({ length: 4 }, (_, i) => `long${i}=${value}`).join('&');
  return { name: 'long values', contentType: 'application/x-www-form-urlencoded', body: Buffer.from(body) };
}

interface Answer {
  status: number;
  body: string;
  error?: string;
}

function send(
  url: string,
  options: { method: string; agent?: http.Agent; contentType?: string; body?: Buffer; localAddress?: string },
): Promise<Answer> {
  return new Promise((resolve) => {
    const request = http.request(
      url,
      {
        method: options.method,
        agent: options.agent ?? false,
        ...(options.localAddress !== undefined && { localAddress: options.localAddress }),
        headers: {
          'user-agent': 'Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0',
          accept: 'text/html,application/json',
          ...(options.contentType !== undefined && { 'content-type': options.contentType }),
        },
      },
      (response) => {
        let body = '';
        response.setEncoding('latin1');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
        response.on('error', (err) => resolve({ status: response.statusCode ?? 0, body, error: err.message }));
      },
    );
    request.setTimeout(60_000, () => request.destroy(new Error('timeout')));
    request.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, body: '', error: err.code ?? err.message }));
    request.end(options.body);
  });
}

/** The sum of a counter's samples whose labels include `labels`. */
function counter(metrics: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

describe('inspection isolation: a request slow to inspect costs only its sender', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let originPort: number;
  /** Requests that reached the origin, by path. */
  const seenAt = new Map<string, number>();

  before(async () => {
    origin = http.createServer((request, response) => {
      const path = (request.url ?? '').split('?')[0]!;
      seenAt.set(path, (seenAt.get(path) ?? 0) + 1);
      request.resume();
      request.on('end', () => response.end('ok'));
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    originPort = (origin.address() as net.AddressInfo).port;
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_WAF_THREADS: '1',
        TPS_WAF_REQUEST_BUDGET_MS: String(BUDGET_MS),
        // Every expensive body reaches the engine here: the early refusal of a client that keeps
        // exceeding the budget is tested in inspection-isolation/fairness.ts.
        TPS_WAF_OFFENDER_OVERRUNS: '0',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });

  after(async () => {
    await tps.stop();
    origin.closeAllConnections();
    origin.close();
  });

  async function createProxy(waf: Record<string, unknown> = {}) {
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: ORIGIN, port: originPort }] }, waf },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined), {
      timeoutMs: 30_000,
    });
    return { id, port, url: `http://${FRONTEND}:${port}` };
  }

  async function metrics(): Promise<string> {
    return (await fetch(`${tps.metricsUrl}/metrics`)).text();
  }

  async function wafEvents(proxyId: string): Promise<any[]> {
    const events = (await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1000`)).body
      .data as any[];
    return events.filter((event) => event.relationships.trafficConfig.data.id === proxyId);
  }

  it('ends each expensive request alone: refused or blocked, never at the origin; benign keep-alive clients see no failure; no WAF thread restart', {
    timeout: 600_000,
  }, async (t) => {
    const proxy = await createProxy({ requestBodyLimit: BODY_LIMIT });
    const shapes = [manyParameters(), manyParts(), deepJson(), longValues()];
    for (const shape of shapes)
      assert.ok(shape.body.length <= BODY_LIMIT, `${shape.name}: ${shape.body.length} bytes, under the body limit`);

    // Benign clients: keep-alive connections sending GETs and small forms until the attacker is done.
    let attacking = true;
    const benign = new Map<string, number>();
    const benignClient = async (client: number): Promise<void> => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: BENIGN });
      try {
        for (let i = 0; attacking || i < 5; i++) {
          const answer =
            i % 2 === 0
              ? await send(`${proxy.url}/benign?q=red+shoes&page=${i}`, { method: 'GET', agent })
              : await send(`${proxy.url}/benign`, {
                  method: 'POST',
                  agent,
                  contentType: 'application/x-www-form-urlencoded',
                  body: Buffer.from(`name=client+${client}&comment=hello+there&page=${i}`),
                });
          const key = answer.error ?? String(answer.status);
          benign.set(key, (benign.get(key) ?? 0) + 1);
        }
      } finally {
        agent.destroy();
      }
    };
    const clients = Promise.all([0, 1, 2].map(benignClient));

    const attacker = new Map<string, string[]>();
    try {
      for (let round = 0; round < 3; round++) {
        for (const shape of shapes) {
          const answer = await send(`${proxy.url}/expensive`, {
            method: 'POST',
            contentType: shape.contentType,
            body: shape.body,
            localAddress: ATTACKER,
          });
          const outcomes = attacker.get(shape.name) ?? [];
          outcomes.push(answer.error ?? String(answer.status));
          attacker.set(shape.name, outcomes);
          if (answer.status === 503) assert.match(answer.body, /[0-9a-f]{32}/, 'the page shows the support id');
        }
      }
    } finally {
      attacking = false;
    }
    await clients;
    t.diagnostic(`benign answers: ${JSON.stringify([...benign])}; attacker: ${JSON.stringify([...attacker])}`);
    t.diagnostic(
      (await metrics())
        .split('\n')
        .filter((line) => line.startsWith('tps_edge_waf_uninspected_total{') || line.startsWith('tps_edge_waf_thread_restarts_total{'))
        .join('; '),
    );

    assert.deepEqual([...benign.keys()], ['200'], `benign answers: ${JSON.stringify([...benign])}`);
    for (const [name, outcomes] of attacker) {
      for (const outcome of outcomes) assert.ok(['503', '403'].includes(outcome), `${name}: ${outcomes.join(',')}`);
    }
    assert.equal(seenAt.get('/expensive') ?? 0, 0, 'no expensive request reached the origin');

    // Each 503 is counted: an inspection past the budget, or a request of this client past its share of the threads' time.
    const refused = [...attacker.values()].flat().filter((outcome) => outcome === '503').length;
    const uninspected = (text: string, reason: string): number =>
      counter(text, 'tps_edge_waf_uninspected_total', { proxy: proxy.id, reason, outcome: 'refused' });
    const text = await waitFor('the budget overruns and cost-share refusals counted', async () => {
      const now = await metrics();
      return uninspected(now, 'budget') + uninspected(now, 'cost-share') === refused ? now : undefined;
    });
    assert.ok(uninspected(text, 'budget') > 0, 'some inspections ran past the budget (else this test proves nothing)');
    assert.ok(uninspected(text, 'cost-share') > 0, 'past its share, the client was refused before inspection');
    assert.match(text, /# HELP tps_edge_waf_thread_restarts_total /);
    assert.equal(counter(text, 'tps_edge_waf_thread_restarts_total'), 0, 'no WAF thread was restarted');
  });

  /** Each limit: the body at the limit passes (and reaches the origin), one more is refused with the limit's rule. */
  const limits: Record<string, { value: number; rule: number; contentType: string; body: (n: number) => string; uri?: string }> = {
    arguments: {
      value: 20,
      rule: 200007,
      contentType: 'application/x-www-form-urlencoded',
      // the query string counts too
      uri: '?q1=a&q2=b',
      body: (n) => Array.from({ length: n - 2 }, (_, i) => `a${i}=v`).join('&'),
    },
    multipartParts: {
      value: 10,
      rule: 200110,
      contentType: 'multipart/form-data; boundary=b0undary',
      body: (n) =>
        `${Array.from({ length: n }, (_, i) => `--b0undary\r\nContent-Disposition: form-data; name="p${i}"\r\n\r\nvalue ${i}\r\n`).join('')}--b0undary--\r\n`,
    },
    jsonDepth: {
      value: 10,
      rule: 200111,
      contentType: 'application/json',
      body: (n) => `${'{"a":'.repeat(n - 1)}{"leaf":"x"}${'}'.repeat(n - 1)}`,
    },
    jsonElements: {
      // (its values are arguments too: fewer than the arguments limit)
      value: 15,
      rule: 200112,
      contentType: 'application/json',
      body: (n) => `[${Array.from({ length: n - 1 }, (_, i) => i).join(',')}]`,
    },
    xmlDepth: {
      value: 10,
      rule: 200113,
      contentType: 'application/xml',
      body: (n) => `<?xml version="1.0"?>${'<e>'.repeat(n)}text${'</e>'.repeat(n)}`,
    },
    valueLength: {
      value: 2000,
      rule: 200114,
      contentType: 'application/x-www-form-urlencoded',
      body: (n) => `short=1&long=${'b'.repeat(n)}`,
    },
  };

  it('refuses a request at one past each input limit of the proxy (403 and a WAF_EVENT naming the limit), passes it at the limit', {
    timeout: 300_000,
  }, async () => {
    const inputLimits = Object.fromEntries(Object.entries(limits).map(([name, limit]) => [name, limit.value]));
    const proxy = await createProxy({ inputLimits });
    assert.deepEqual((await api.get(`${CONFIGS}/${proxy.id}`)).body.data.attributes.waf.inputLimits, inputLimits);
    for (const [name, limit] of Object.entries(limits)) {
      const path = `/limit-${name}`;
      const at = await send(`${proxy.url}${path}${limit.uri ?? ''}`, {
        method: 'POST',
        contentType: limit.contentType,
        body: Buffer.from(limit.body(limit.value)),
      });
      if (at.status !== 200) {
        const events = await waitFor('its event', async () => ((await wafEvents(proxy.id)).length > 0 ? wafEvents(proxy.id) : undefined));
        assert.fail(`${name} at its limit: ${at.status}; events: ${JSON.stringify(events.map((e) => e.attributes.rules))}`);
      }
      assert.equal(seenAt.get(path), 1, `${name} at its limit reached the origin`);
      const past = await send(`${proxy.url}${path}${limit.uri ?? ''}`, {
        method: 'POST',
        contentType: limit.contentType,
        body: Buffer.from(limit.body(limit.value + 1)),
      });
      assert.equal(past.status, 403, `${name} one past its limit`);
      assert.equal(seenAt.get(path), 1, `${name} one past its limit never reached the origin`);
    }
    const events = await waitFor('an event per refusal', async () => {
      const found = await wafEvents(proxy.id);
      return found.length >= Object.keys(limits).length ? found : undefined;
    });
    for (const [name, limit] of Object.entries(limits)) {
      const event = events.find((e) => e.attributes.rules.some((r: { modSecId: number }) => r.modSecId === limit.rule));
      assert.ok(event, `a WAF_EVENT names rule ${limit.rule} (${name})`);
      assert.equal(event.attributes.action, 'BLOCKED');
    }
  });

  it("validates a proxy's input limits (422 with a pointer)", { timeout: 60_000 }, async () => {
    const proxy = await createProxy();
    const patched = await api.call('PATCH', `${CONFIGS}/${proxy.id}`, {
      data: { type: 'httpProxy', id: proxy.id, attributes: { waf: { inputLimits: { arguments: 0 } } } },
    });
    assert.equal(patched.status, 422, JSON.stringify(patched.body));
    assert.equal(patched.body.errors[0].source.pointer, '/data/attributes/waf/inputLimits/arguments');
  });
});

fairnessTests();
