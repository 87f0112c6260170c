/**
 * No listener can starve the node: 25,000 connections held half-sent against one listener of a
 * started `tps serve` (edge on, two workers, default caps and timeouts), from several client
 * processes (test/e2e/listener-exhaustion/holder.ts: each its own descriptors) and addresses of
 * 127.0.0.0/8, leave the rest of the node answering.
 *
 * - Against the API listener (partial heads and partial bodies of `POST /oauth/token`, the
 *   unauthenticated route): an HTTP proxy keeps serving, `/healthz` answers, an authenticated API
 *   call from another address is answered; the connections over the caps are refused at accept,
 *   counted (`tps_listener_refused_total`).
 * - Against an HTTP proxy's front end (from 256 addresses, so that no per-source cap holds them
 *   back): the API and `/healthz` keep answering; the edge holds no more than its node-wide budget
 *   (`tps_edge_node_connections` <= `tps_edge_node_connection_budget`), the rest refused at accept.
 * - Against a layer 4 UDP proxy, with a small TPS_EDGE_MAX_CONNECTIONS: sessions from many sources
 *   take the node's budget (each holds a file descriptor), a new HTTP connection is then refused at
 *   accept (NODE_BUDGET) and another UDP proxy's first datagram dropped (NODE_BUDGET, UDP); once
 *   the sessions end, the HTTP proxy serves again.
 *
 * Loops are bounded (each holder attempts its connections once), and every wait has a deadline.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { createSocket, type Socket as DatagramSocket } from 'node:dgram';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import net, { connect as netConnect, type Socket as NetSocket } from 'node:net';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';
import type { HolderCommand, HolderJob, HolderReport } from './listener-exhaustion/holder.ts';

const HOLDER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'listener-exhaustion/holder.ts');
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const FRONTEND = '127.0.0.180';
const ORIGIN = '127.0.0.181';
const CONNECTIONS = 25_000;
const HOLDERS = 4;

/** A running holder process and its last report. */
interface Holder {
  child: ChildProcess;
  report: HolderReport | undefined;
}

function startHolder(job: HolderJob): Holder {
  const child = fork(HOLDER, [JSON.stringify(job)], { execArgv: [], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const holder: Holder = { child, report: undefined };
  child.on('message', (message: HolderReport) => {
    holder.report = message;
  });
  return holder;
}

async function stopHolders(holders: Holder[]): Promise<void> {
  await Promise.all(
    holders.map(async ({ child }) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ kind: 'stop' } satisfies HolderCommand);
      const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(kill);
    }),
  );
}

/** Starts `HOLDERS` holders sharing `CONNECTIONS` connections, each with its own sources; resolves when all have attempted theirs. */
async function holdConnections(
  target: { host: string; port: number },
  requests: HolderJob['requests'],
  sourcesOf: (holder: number) => string[],
) {
  const holders = Array.from({ length: HOLDERS }, (_, index) =>
    startHolder({ ...target, requests, sources: sourcesOf(index), count: CONNECTIONS / HOLDERS, concurrency: 512 }),
  );
  try {
    await waitFor('every holder to attempt its connections', async () => holders.every((holder) => holder.report?.done === true), {
      timeoutMs: 240_000,
      intervalMs: 500,
    });
  } catch (error) {
    await stopHolders(holders);
    throw error;
  }
  return holders;
}

function summary(holders: Holder[]): string {
  const total = { attempted: 0, connected: 0, open: 0, closedByServer: 0, failed: 0 };
  const answers: Record<string, number> = {};
  for (const { report } of holders) {
    if (report === undefined) continue;
    for (const key of Object.keys(total) as (keyof typeof total)[]) total[key] += report[key];
    for (const [status, n] of Object.entries(report.answers)) answers[status] = (answers[status] ?? 0) + n;
  }
  return JSON.stringify({ ...total, answers });
}

/** The sum of a metric's samples whose labels include `labels` (a metric without labels: its value). */
function sample(metrics: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    if (!(line.startsWith(`${name}{`) || line.startsWith(`${name} `))) continue;
    if (!Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** A GET through the proxy on a connection of its own; the status, 0 when refused or cut. */
function getThrough(url: string): Promise<number> {
  return new Promise((resolve) => {
    const request = http.get(url, { agent: false, headers: { 'user-agent': 'Mozilla/5.0', accept: '*/*' } }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
      response.on('error', () => resolve(0));
    });
    request.setTimeout(20_000, () => request.destroy());
    request.on('error', () => resolve(0));
  });
}

describe('no listener can starve the node', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let proxy: { id: string; port: number; url: string };

  before(async () => {
    origin = http.createServer((_request, response) => response.end('ok'));
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    const originPort = (origin.address() as net.AddressInfo).port;
    // The default caps, timeouts and budget: only what places the proxies on loopback is set.
    tps = await startTps({
      env: { TPS_EDGE: 'true', TPS_EDGE_WORKERS: '2', TPS_FRONTEND_IPS: FRONTEND, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [{ address: ORIGIN, port: originPort }] } },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('the proxy ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
      timeoutMs: 30_000,
    });
    proxy = { id, port, url: `http://${FRONTEND}:${port}` };
  });

  after(async () => {
    await tps?.stop();
    origin?.closeAllConnections();
    origin?.close();
  });

  async function metrics(): Promise<string> {
    return (await fetch(`${tps.metricsUrl}/metrics`)).text();
  }

  it('keeps the proxies, /healthz and other API clients answering under 25,000 connections held against the API', {
    timeout: 600_000,
  }, async (t) => {
    const api_ = new URL(tps.url);
    // Each holder from an address of its own, as one attacker per address.
    const holders = await holdConnections({ host: api_.hostname, port: Number(api_.port) }, 'api', (index) => [`127.0.1.${10 + index}`]);
    try {
      t.diagnostic(`API holders: ${summary(holders)}`);
      assert.equal(await getThrough(`${proxy.url}/during-api-flood`), 200, 'the proxy serves');
      const health = await fetch(`${tps.metricsUrl}/healthz`);
      assert.equal(health.status, 200, await health.text());
      const listed = await api.get(CONFIGS);
      assert.equal(listed.status, 200, JSON.stringify(listed.body));
      assert.ok(listed.body.data.some((config: { id: string }) => config.id === proxy.id));
      // Past the caps, refused at accept and counted; what was let in is bounded by them.
      const text = await metrics();
      const refusedAtAccept = sample(text, 'tps_listener_refused_total', { listener: 'api', stage: 'accept' });
      t.diagnostic(
        `refused at accept: ${refusedAtAccept}; open API connections: ${sample(text, 'tps_listener_connections', { listener: 'api' })}`,
      );
      assert.ok(refusedAtAccept > 0, 'connections over the caps refused at accept and counted');
      assert.ok(sample(text, 'tps_listener_connections', { listener: 'api' }) <= 1024, 'the API holds no more than its cap');
    } finally {
      await stopHolders(holders);
    }
  });

  it('keeps the API and /healthz answering under 25,000 connections held against an HTTP proxy', { timeout: 600_000 }, async (t) => {
    // 64 addresses per holder: 256 sources, so that no per-source cap is what holds them back.
    const holders = await holdConnections({ host: FRONTEND, port: proxy.port }, 'proxy', (index) =>
      Array.from({ length: 64 }, (_, n) => `127.0.${2 + index}.${10 + n}`),
    );
    try {
      t.diagnostic(`proxy holders: ${summary(holders)}`);
      const health = await fetch(`${tps.metricsUrl}/healthz`);
      assert.equal(health.status, 200, await health.text());
      const listed = await api.get(CONFIGS);
      assert.equal(listed.status, 200, JSON.stringify(listed.body));
      const text = await metrics();
      const open = sample(text, 'tps_edge_node_connections');
      const budget = sample(text, 'tps_edge_node_connection_budget');
      const refused = sample(text, 'tps_edge_refused_total', { proxy: proxy.id });
      t.diagnostic(
        `edge connections ${open} of a budget of ${budget}; refused: ${refused} (NODE_BUDGET ${sample(text, 'tps_edge_refused_total', { reason: 'NODE_BUDGET' })})`,
      );
      assert.ok(budget > 0, 'the node has a budget of edge connections');
      assert.ok(open <= budget, 'the edge holds no more than its budget');
      assert.ok(refused > 0, 'connections over the caps refused at accept and counted');
    } finally {
      await stopHolders(holders);
    }
    // Once the holders let go, the proxy serves again.
    await waitFor('the proxy serving again', async () => (await getThrough(`${proxy.url}/after`)) === 200, { timeoutMs: 60_000 });
  });
});

/** A raw connection: what it sent, then everything the server wrote until it closed (or `untilMs` passed: `closed` false). */
function exchange(
  target: { host: string; port: number },
  localAddress: string,
  data: string,
  untilMs = 30_000,
): Promise<{ text: string; closed: boolean; reset: boolean }> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: target.host, port: target.port, localAddress });
    let text = '';
    let reset = false;
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ text, closed: false, reset });
    }, untilMs);
    socket.on('connect', () => socket.write(data));
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', (error: NodeJS.ErrnoException) => (reset ||= error.code === 'ECONNRESET'));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true, reset });
    });
  });
}

/** Opens a connection from `localAddress` and keeps it; resolves once connected. */
function openIdle(target: { host: string; port: number }, localAddress: string): Promise<NetSocket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host: target.host, port: target.port, localAddress }, () => resolve(socket));
    socket.on('error', reject);
  });
}

describe('the API and operators listeners: bounds, each counted', () => {
  let tps: Tps;
  let target: { host: string; port: number };
  let operators: { host: string; port: number };
  const TOKEN_HEAD =
    'POST /oauth/token HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n';

  before(async () => {
    tps = await startTps({
      env: {
        TPS_API_UNAUTHENTICATED_RATE_LIMIT_PER_MINUTE: '3',
        TPS_API_HEADERS_TIMEOUT_SECONDS: '5',
        TPS_API_REQUEST_TIMEOUT_SECONDS: '6',
        TPS_API_MAX_CONNECTIONS_PER_SOURCE: '4',
        TPS_API_MAX_CONNECTIONS: '20',
        TPS_API_BODY_LIMIT: '2k',
        TPS_METRICS_MAX_CONNECTIONS: '3',
      },
    });
    const url = new URL(tps.url);
    target = { host: url.hostname, port: Number(url.port) };
    const metricsUrl = new URL(tps.metricsUrl);
    operators = { host: metricsUrl.hostname, port: Number(metricsUrl.port) };
  });
  after(() => tps?.stop());

  async function metricsText(): Promise<string> {
    return (await fetch(`${tps.metricsUrl}/metrics`)).text();
  }
  const refusals = async (labels: Record<string, string>) => sample(await metricsText(), 'tps_listener_refused_total', labels);

  it('refuses token requests over the per-address limit before their body: 429, Retry-After, connection closed', async () => {
    // The address's budget: three calls, answered (bad credentials) once their bodies are in.
    for (let i = 0; i < 3; i++) {
      const answer = await exchange(
        target,
        '127.0.4.1',
        `${TOKEN_HEAD.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n')}${'x'.repeat(100)}`,
      );
      assert.doesNotMatch(answer.text, /^HTTP\/1\.1 429 /, `call ${i + 1} is within the limit`);
    }
    // The fourth sends its head only: answered at once, and its body is not waited for.
    const refused = await exchange(target, '127.0.4.1', TOKEN_HEAD);
    assert.ok(refused.closed, 'the connection is closed with the answer, its body not waited for');
    assert.match(refused.text, /^HTTP\/1\.1 429 /);
    assert.match(refused.text, /\r\nretry-after: \d+\r\n/i);
    assert.match(refused.text, /"code":"TOO_MANY_REQUESTS"/);
    assert.ok((await refusals({ listener: 'api', stage: 'head', reason: 'RATE_LIMIT' })) >= 1);
    // Another address keeps its own budget; a body that never finishes ends at the request timeout (408), counted.
    const slow = await exchange(target, '127.0.4.2', `${TOKEN_HEAD}grant_type=`);
    assert.ok(slow.closed);
    assert.match(slow.text, /^HTTP\/1\.1 408 /);
    assert.ok((await refusals({ listener: 'api', stage: 'body', reason: 'REQUEST_TIMEOUT' })) >= 1);
  });

  it('ends a head that does not finish at the headers timeout (408), counted', async () => {
    const before = await refusals({ listener: 'api', stage: 'head', reason: 'HEADERS_TIMEOUT' });
    const answer = await exchange(target, '127.0.4.3', 'GET /openapi.json HTTP/1.1\r\nHost: api.test\r\nX-Slow: ');
    assert.ok(answer.closed);
    assert.match(answer.text, /^HTTP\/1\.1 408 /);
    assert.equal(await refusals({ listener: 'api', stage: 'head', reason: 'HEADERS_TIMEOUT' }), before + 1);
  });

  it('refuses a body over the limit before reading it (413), counted', async () => {
    const answer = await exchange(target, '127.0.4.4', TOKEN_HEAD.replace('Content-Length: 100', 'Content-Length: 4096'));
    assert.ok(answer.closed, 'the connection ends with the answer');
    assert.match(answer.text, /^HTTP\/1\.1 413 /);
    assert.ok((await refusals({ listener: 'api', stage: 'body', reason: 'BODY_TOO_LARGE' })) >= 1);
  });

  it('caps connections per source and in total at accept, counted; other sources keep theirs', async () => {
    const openApi = async () => sample(await metricsText(), 'tps_listener_connections', { listener: 'api' });
    // Held connections send nothing: each phase is over well within the headers timeout.
    const held: NetSocket[] = [];
    try {
      for (let i = 0; i < 4; i++) held.push(await openIdle(target, '127.0.4.5'));
      await waitFor('four connections held', async () => (await openApi()) >= 4);
      const fifth = await exchange(target, '127.0.4.5', 'GET /openapi.json HTTP/1.1\r\nHost: api.test\r\n\r\n');
      assert.ok(fifth.closed && fifth.text === '', 'the fifth connection from one source is closed at accept, unanswered');
      assert.ok((await refusals({ listener: 'api', stage: 'accept', reason: 'SOURCE_CONNECTIONS' })) >= 1);
    } finally {
      for (const socket of held.splice(0)) socket.destroy();
    }
    await waitFor('the connections gone', async () => (await openApi()) === 0);
    try {
      // The total: 20 connections from 5 sources fill it; a sixth source is refused too.
      for (let source = 0; source < 5; source++) for (let i = 0; i < 4; i++) held.push(await openIdle(target, `127.0.5.${source + 1}`));
      await waitFor('twenty connections held', async () => (await openApi()) >= 20);
      const over = await exchange(target, '127.0.5.9', 'GET /openapi.json HTTP/1.1\r\nHost: api.test\r\n\r\n');
      assert.ok(over.closed && over.text === '', 'a connection over the total is closed at accept');
      assert.ok((await refusals({ listener: 'api', stage: 'accept', reason: 'CONNECTIONS' })) >= 1);
    } finally {
      for (const socket of held) socket.destroy();
    }
    // Freed places are given back: a new connection is served again.
    await waitFor('the API answering again', async () => (await fetch(`${tps.url}/openapi.json`)).status === 200, { retryErrors: true });
  });

  it('caps the operators listener at accept, counted', async () => {
    const held: NetSocket[] = [];
    try {
      for (let i = 0; i < 3; i++) held.push(await openIdle(operators, '127.0.0.1'));
      const over = await exchange(operators, '127.0.0.1', 'GET /healthz HTTP/1.1\r\nHost: ops\r\n\r\n');
      assert.ok(over.closed && over.text === '', 'the fourth connection is closed at accept');
    } finally {
      for (const socket of held) socket.destroy();
    }
    const counted = await waitFor(
      'the refusal counted',
      async () => {
        const n = await refusals({ listener: 'metrics', stage: 'accept', reason: 'CONNECTIONS' });
        return n >= 1 ? n : undefined;
      },
      { retryErrors: true },
    );
    assert.ok(counted >= 1);
  });
});

describe('UDP sessions count in the edge budget', () => {
  const BUDGET = 6;
  const UDP_FRONTEND = '127.0.0.182';
  const UDP_ORIGIN = '127.0.0.183';
  /** Sources of the flood: twice the budget, each its own session. */
  const SOURCES = Array.from({ length: 2 * BUDGET }, (_, n) => `127.0.66.${10 + n}`);
  let tps: Tps;
  let api: TenantApi;
  let httpOrigin: http.Server;
  let udpOrigin: DatagramSocket;

  async function bound(address: string): Promise<DatagramSocket> {
    const socket = createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, address, resolve));
    return socket;
  }

  async function create(attributes: object, type: 'httpProxy' | 'l4Proxy'): Promise<string> {
    const created = await api.call('POST', CONFIGS, { data: { type, attributes } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor(`${type} ${id} ACTIVE`, async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE', {
      timeoutMs: 30_000,
    });
    return id;
  }

  async function metrics(): Promise<string> {
    return (await fetch(`${tps.metricsUrl}/metrics`)).text();
  }

  before(async () => {
    httpOrigin = http.createServer((_request, response) => response.end('ok'));
    await new Promise<void>((resolve) => httpOrigin.listen(0, UDP_ORIGIN, resolve));
    // Echoes every datagram: the relay's clients never show they receive, every session stays unconfirmed.
    udpOrigin = await bound(UDP_ORIGIN);
    udpOrigin.on('message', (message, rinfo) => udpOrigin.send(message, rinfo.port, rinfo.address));
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_EDGE_MAX_CONNECTIONS: String(BUDGET),
        TPS_FRONTEND_IPS: UDP_FRONTEND,
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });

  after(async () => {
    await tps?.stop();
    httpOrigin?.closeAllConnections();
    httpOrigin?.close();
    udpOrigin?.close();
  });

  it('refuses HTTP connections while UDP sessions hold the budget, and serves again once they end', { timeout: 180_000 }, async (t) => {
    const httpPort = await freePort(UDP_FRONTEND);
    const httpId = await create(
      {
        frontend: { ipv4: UDP_FRONTEND, port: httpPort },
        backend: { hosts: [{ address: UDP_ORIGIN, port: (httpOrigin.address() as net.AddressInfo).port }] },
      },
      'httpProxy',
    );
    const url = `http://${UDP_FRONTEND}:${httpPort}`;
    assert.equal(await getThrough(`${url}/before`), 200, 'the HTTP proxy serves before the flood');
    const udpAttributes = (port: number) => ({
      frontend: { ipv4: UDP_FRONTEND, port },
      backend: { hosts: [{ address: UDP_ORIGIN, port: udpOrigin.address().port }] },
      protocols: ['UDP'],
      threatIntelligence: { enabled: false },
    });
    const udpPort = await freePort(UDP_FRONTEND);
    const udpId = await create(udpAttributes(udpPort), 'l4Proxy');
    const otherUdpPort = await freePort(UDP_FRONTEND);
    const otherUdpId = await create(udpAttributes(otherUdpPort), 'l4Proxy');

    const clients = await Promise.all(SOURCES.map(bound));
    const late = await bound('127.0.66.200');
    try {
      // Each source opens a session; past the budget, a newcomer takes the place of the oldest
      // unconfirmed one. Sent again until the budget is full (a datagram may be lost).
      await waitFor(
        'UDP sessions to fill the node budget',
        async () => {
          for (const [index, client] of clients.entries()) client.send(`flood-${index}`, udpPort, UDP_FRONTEND);
          const text = await metrics();
          return (
            sample(text, 'tps_edge_node_connections') === BUDGET &&
            sample(text, 'tps_edge_udp_sessions_evicted_total', { proxy: udpId }) > 0
          );
        },
        { timeoutMs: 30_000, intervalMs: 500 },
      );
      // A new TCP connection to the HTTP proxy: refused at accept, counted.
      assert.equal(await getThrough(`${url}/during`), 0, 'refused while the sessions hold the budget');
      // Another UDP proxy, with no unconfirmed session of its own to evict: its first datagram is dropped.
      late.send('late', otherUdpPort, UDP_FRONTEND);
      const text = await waitFor(
        'the refusals counted',
        async () => {
          const text = await metrics();
          const http = sample(text, 'tps_edge_refused_total', { proxy: httpId, reason: 'NODE_BUDGET' });
          const udp = sample(text, 'tps_edge_refused_total', { proxy: otherUdpId, protocol: 'UDP', reason: 'NODE_BUDGET' });
          return http > 0 && udp > 0 && text;
        },
        { timeoutMs: 15_000, intervalMs: 250 },
      );
      t.diagnostic(
        `node connections ${sample(text, 'tps_edge_node_connections')} of ${sample(text, 'tps_edge_node_connection_budget')}; ` +
          `evicted ${sample(text, 'tps_edge_udp_sessions_evicted_total', { proxy: udpId })}; ` +
          `NODE_BUDGET: ${sample(text, 'tps_edge_refused_total', { reason: 'NODE_BUDGET' })}`,
      );
      assert.equal(sample(text, 'tps_edge_node_connection_budget'), BUDGET);
      assert.ok(sample(text, 'tps_edge_node_connections') <= BUDGET, 'never more than the budget');
      assert.equal(sample(text, 'tps_edge_udp_sessions_evicted_total', { proxy: otherUdpId }), 0);
    } finally {
      for (const client of clients) client.close();
      late.close();
    }
    // The sessions end at their idle time (30 s, not a setting) and give their places back.
    await waitFor('the UDP sessions to end', async () => sample(await metrics(), 'tps_edge_node_connections') === 0, {
      timeoutMs: 120_000,
      intervalMs: 1000,
    });
    assert.equal(await getThrough(`${url}/after`), 200, 'the HTTP proxy serves again');
  });
});
