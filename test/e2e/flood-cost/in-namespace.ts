/**
 * Runs inside a network namespace of its own (test/e2e/flood-cost.test.ts starts it with
 * `unshare -n`, loopback up): a `tps serve` whose edge may create its nftables table there, a
 * flood, and what the kernel and the service show. Prints one JSON line of observations last; the
 * test asserts on them. Never run it in the machine's own namespace: it lists and expects the
 * table `inet tps`.
 *
 * Scenarios (argv[2]): `escalation` (kernel blocking on) and `no-capability` (started without
 * CAP_NET_ADMIN: auto falls back with a warning, nftables refuses to start).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { TenantApi } from '../../support/api-client.ts';
import { freePort } from '../../support/ports.ts';
import { createTenant, startTps, type Tps } from '../../support/tps.ts';
import { waitFor } from '../../support/wait.ts';

const execFileAsync = promisify(execFile);
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const FRONTEND = '127.0.0.2';
const ORIGIN = '127.0.0.9';
const FLOODER = '127.0.0.20';
const BENIGN = '127.0.0.21';
/** On the threat feed. */
const LISTED = '127.0.0.30';
const LIMIT = { thresholds: [{ requests: 5, periodSeconds: 60 }], blockSeconds: 8 };
const FACTOR = 4;

const scenario = process.argv[2];
const result: Record<string, unknown> = { scenario };

async function nft(...args: string[]): Promise<string> {
  return (await execFileAsync('nft', args)).stdout;
}

async function tableExists(): Promise<boolean> {
  return (await nft('list', 'tables')).split('\n').some((line) => line.trim() === 'table inet tps');
}

/** Elements of a set, as nft prints them (`tcp . 127.0.0.20 . 127.0.0.2 . 40000`, `tcp . 2001:db8:5::/64 . ...`). */
async function blockedElements(set = 'blocked_ipv4'): Promise<string[]> {
  type Part = string | number | { prefix: { addr: string; len: number } };
  const parsed = JSON.parse(await nft('-j', 'list', 'set', 'inet', 'tps', set)) as {
    nftables: { set?: { elem?: { elem?: { val: { concat: Part[] } } }[] } }[];
  };
  const elements = parsed.nftables.find((item) => item.set !== undefined)?.set?.elem ?? [];
  const text = (part: Part) => (typeof part === 'object' ? `${part.prefix.addr}/${part.prefix.len}` : String(part));
  return elements.map((element) => (element.elem?.val.concat ?? []).map(text).join(' . '));
}

async function droppedPackets(): Promise<number> {
  const parsed = JSON.parse(await nft('-j', 'list', 'counters', 'table', 'inet', 'tps')) as {
    nftables: { counter?: { name: string; packets: number } }[];
  };
  return parsed.nftables.find((item) => item.counter?.name === 'dropped_ipv4')?.counter?.packets ?? 0;
}

async function metric(tps: Tps, name: string, match: string): Promise<number> {
  const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(name) && line.includes(match)) sum += Number(line.split(' ').at(-1));
  return sum;
}

function get(
  url: string,
  localAddress: string,
  agent?: http.Agent,
  onSocket?: (socket: net.Socket) => void,
): Promise<{ status: number } | { error: string }> {
  return new Promise((resolve) => {
    const request = http.get(url, { localAddress, agent: agent ?? false, timeout: 5_000 }, (response) => {
      response.resume();
      response.on('end', () => resolve({ status: response.statusCode ?? 0 }));
    });
    if (onSocket !== undefined) request.on('socket', onSocket);
    request.on('timeout', () => request.destroy(Object.assign(new Error('timeout'), { code: 'TIMEOUT' })));
    request.on('error', (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
  });
}

/** A TCP connect from `localAddress`: connected, refused, or no answer within a second (dropped). */
function connectOutcome(port: number, localAddress: string, host = FRONTEND): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, localAddress });
    socket.setTimeout(1_000, () => {
      socket.destroy();
      resolve('no answer');
    });
    socket.on('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
  });
}

async function createProxy(api: TenantApi, originPort: number): Promise<{ id: string; url: string; port: number }> {
  const port = await freePort(FRONTEND);
  const created = await api.call('POST', CONFIGS, {
    data: {
      type: 'httpProxy',
      attributes: {
        frontend: { ipv4: FRONTEND, port },
        backend: { hosts: [{ address: ORIGIN, port: originPort }] },
        rateLimiting: LIMIT,
      },
    },
  });
  if (created.status !== 201) throw new Error(`proxy not created: ${JSON.stringify(created.body)}`);
  const id = created.body.data.id as string;
  await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE');
  return { id, url: `http://${FRONTEND}:${port}`, port };
}

async function escalation(): Promise<void> {
  const origin = http.createServer((_request, response) => response.end('origin'));
  await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
  const originPort = (origin.address() as net.AddressInfo).port;
  const feedDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-feed-'));
  fs.writeFileSync(path.join(feedDir, 'feed.txt'), `${LISTED}\n`);
  const tps = await startTps({
    env: {
      TPS_EDGE: 'true',
      TPS_EDGE_WORKERS: '2',
      TPS_FRONTEND_IPS: FRONTEND,
      TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      TPS_KERNEL_BLOCKING: 'auto',
      TPS_KERNEL_BLOCKING_ESCALATION_FACTOR: String(FACTOR),
      TPS_THREAT_FEEDS: path.join(feedDir, 'feed.txt'),
    },
  });
  try {
    result.tableAtStart = await tableExists();
    result.healthWarnings = ((await (await fetch(`${tps.metricsUrl}/healthz`)).json()) as { warnings?: unknown[] }).warnings ?? [];
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const proxyA = await createProxy(api, originPort);
    const proxyB = await createProxy(api, originPort);
    const requestsOfA = () => metric(tps, 'tps_edge_http_requests_total', `proxy="${proxyA.id}"`);

    // The flood: one keep-alive connection, requests one after another, until the kernel has the source.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const statuses: Record<string, number> = {};
    let first429: number | undefined;
    let sent = 0;
    const element = `tcp . ${FLOODER} . ${FRONTEND} . ${proxyA.port}`;
    let inSet = false;
    // The keep-alive connection's end: a reset from the proxy when it closes it on escalation.
    const connection: { socket?: net.Socket; closedWith?: string; sockets?: number } = {};
    const watch = (socket: net.Socket) => {
      if (connection.socket === socket) return;
      connection.socket = socket;
      delete connection.closedWith;
      // Only the connection in use counts: an earlier one the client let go may close later.
      socket.on('error', (error: NodeJS.ErrnoException) => {
        if (connection.socket === socket) connection.closedWith ??= error.code ?? 'error';
      });
      socket.on('close', () => {
        if (connection.socket === socket) connection.closedWith ??= 'end';
      });
      connection.sockets = (connection.sockets ?? 0) + 1;
    };
    // The first request warms the worker up (its WAF engine starts with it).
    await get(`${proxyA.url}/warm-up`, BENIGN);
    const deadline = Date.now() + 30_000;
    while (!inSet && Date.now() < deadline) {
      const answer = await get(`${proxyA.url}/flood`, FLOODER, agent, watch);
      sent++;
      const key = 'status' in answer ? String(answer.status) : answer.error;
      statuses[key] = (statuses[key] ?? 0) + 1;
      if (key === '429') first429 ??= sent;
      if (sent % 10 === 0 || !('status' in answer)) inSet = (await blockedElements()).includes(element);
    }
    result.keepAliveClosedWith = await waitFor('the keep-alive connection closed', async () => connection.closedWith);
    result.floodConnections = connection.sockets;
    agent.destroy();
    result.flood = { sent, statuses, first429 };
    result.inSet = inSet;
    result.element = element;
    result.setAfterEscalation = await blockedElements();
    result.escalations = await metric(tps, 'tps_edge_kernel_escalations_total', 'reason="rate-limit"');
    result.blockedSourcesGauge = await metric(tps, 'tps_edge_kernel_blocked_sources', 'reason="rate-limit"');

    // What proxy A counted settles (workers report once a second): at least every answer the
    // clients got (the warm-up and the flood's), and unchanged for a while. Then the flooder keeps trying.
    const answered = 1 + (statuses['200'] ?? 0) + (statuses['429'] ?? 0);
    let settled = await requestsOfA();
    await waitFor(
      'the request counts of proxy A to settle',
      async () => {
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        const now = await requestsOfA();
        const same = now === settled && now >= answered;
        settled = now;
        return same;
      },
      { timeoutMs: 30_000 },
    );
    const droppedBefore = await droppedPackets();
    const attempts: string[] = [];
    for (let i = 0; i < 3; i++) attempts.push(await connectOutcome(proxyA.port, FLOODER));
    result.flooderAttempts = attempts;
    result.droppedBefore = droppedBefore;
    result.droppedAfter = await droppedPackets();

    // Served meanwhile: another source on the same proxy, the same source on another proxy.
    result.benignOnA = await get(`${proxyA.url}/benign`, BENIGN);
    result.flooderOnB = await get(`${proxyB.url}/other`, FLOODER);
    // Once the benign request is counted, the count of A holds it and nothing of the flooder's attempts.
    await waitFor('the benign request counted', async () => (await requestsOfA()) > settled);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    result.requestsOfAAfterAttempts = (await requestsOfA()) - settled;
    result.droppedMetric = await metric(tps, 'tps_edge_kernel_dropped_packets_total', 'family="ipv4"');

    // The block ends (blockSeconds), the kernel's element with it: the flooder is served again.
    const servedAgain = await waitFor(
      'the flooder served again after its block',
      async () => {
        const answer = await get(`${proxyA.url}/again`, FLOODER);
        return 'status' in answer && answer.status === 200 ? answer : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    result.servedAgain = servedAgain;
    result.setAfterBlock = await blockedElements();

    // A threat-feed source that keeps connecting to a layer 4 proxy: reset at accept, then dropped.
    const l4Port = await freePort(FRONTEND);
    const l4 = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: { frontend: { ipv4: FRONTEND, port: l4Port }, backend: { hosts: [{ address: ORIGIN, port: originPort }] } },
      },
    });
    if (l4.status !== 201) throw new Error(`layer 4 proxy not created: ${JSON.stringify(l4.body)}`);
    await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${l4.body.data.id}`)).body.data.attributes.status === 'ACTIVE');
    const listedElement = `tcp . ${LISTED} . ${FRONTEND} . ${l4Port}`;
    const listedOutcomes: Record<string, number> = {};
    let listedInSet = false;
    // Until the kernel drops it: the refusals reach the supervisor a few times a second and the set
    // is updated by a process of its own, which a busy machine may take seconds to run. Bounded.
    const listedDeadline = Date.now() + 60_000;
    for (let i = 0; i < 5_000 && !listedInSet && Date.now() < listedDeadline; i++) {
      const outcome = await connectOutcome(l4Port, LISTED);
      listedOutcomes[outcome] = (listedOutcomes[outcome] ?? 0) + 1;
      if (i % 5 === 4) listedInSet = (await blockedElements()).includes(listedElement);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    result.listed = { outcomes: listedOutcomes, inSet: listedInSet, afterwards: await connectOutcome(l4Port, LISTED) };
    result.unlistedOnL4 = await connectOutcome(l4Port, BENIGN);
    result.threatFeedEscalations = await metric(tps, 'tps_edge_kernel_escalations_total', 'reason="threat-feed"');
  } finally {
    result.kernelLog = tps
      .output()
      .split('\n')
      .filter((line) => line.includes('kernel'));
    await tps.stop();
    origin.close();
    fs.rmSync(feedDir, { recursive: true, force: true });
  }
  result.tableAfterStop = await tableExists();
}

/** An IPv6 source is escalated by its prefix (the rate limiter's /64): its neighbours in it are dropped, others not. */
async function ipv6Prefix(): Promise<void> {
  const frontend = '2001:db8:1::1';
  const flooder = '2001:db8:5::10';
  const neighbour = '2001:db8:5::11';
  const stranger = '2001:db8:6::10';
  for (const address of [frontend, flooder, neighbour, stranger])
    await execFileAsync('ip', ['-6', 'addr', 'add', `${address}/128`, 'dev', 'lo', 'nodad']);
  const origin = http.createServer((_request, response) => response.end('origin'));
  await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
  const tps = await startTps({
    env: {
      TPS_EDGE: 'true',
      TPS_EDGE_WORKERS: '1',
      TPS_FRONTEND_IPS: frontend,
      TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      TPS_KERNEL_BLOCKING: 'nftables',
    },
  });
  try {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(frontend);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv6: frontend, port },
          backend: { hosts: [{ address: ORIGIN, port: (origin.address() as net.AddressInfo).port }] },
          rateLimiting: LIMIT,
        },
      },
    });
    if (created.status !== 201) throw new Error(`proxy not created: ${JSON.stringify(created.body)}`);
    await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${created.body.data.id}`)).body.data.attributes.status === 'ACTIVE');
    const url = `http://[${frontend}]:${port}`;
    await get(`${url}/warm-up`, stranger);
    const element = `tcp . 2001:db8:5::/64 . ${frontend} . ${port}`;
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    let inSet = false;
    for (let sent = 1; sent <= 2_000 && !inSet; sent++) {
      const answer = await get(`${url}/flood`, flooder, agent);
      if (sent % 10 === 0 || !('status' in answer)) inSet = (await blockedElements('blocked_ipv6')).includes(element);
    }
    agent.destroy();
    result.inSet = inSet;
    result.set = await blockedElements('blocked_ipv6');
    result.neighbour = await connectOutcome(port, neighbour, frontend);
    result.stranger = await connectOutcome(port, stranger, frontend);
  } finally {
    await tps.stop();
    origin.close();
  }
}

async function noCapability(): Promise<void> {
  const env = { TPS_EDGE: 'true', TPS_EDGE_WORKERS: '1', TPS_FRONTEND_IPS: FRONTEND };
  const tps = await startTps({ env: { ...env, TPS_KERNEL_BLOCKING: 'auto' } });
  try {
    const health = (await (await fetch(`${tps.metricsUrl}/healthz`)).json()) as {
      ok: boolean;
      warnings?: { code: string; detail: string }[];
    };
    result.health = health;
    result.logMentionsIt = tps.output().includes('kernel blocking off');
  } finally {
    await tps.stop();
  }
  try {
    const required = await startTps({ env: { ...env, TPS_KERNEL_BLOCKING: 'nftables' } });
    await required.stop();
    result.requiredStart = 'started';
  } catch (error) {
    result.requiredStart = (error as Error).message;
  }
}

try {
  if (scenario === 'escalation') await escalation();
  else if (scenario === 'ipv6-prefix') await ipv6Prefix();
  else if (scenario === 'no-capability') await noCapability();
  else throw new Error(`unknown scenario ${scenario}`);
} catch (error) {
  result.error = (error as Error).stack ?? String(error);
}
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0);
