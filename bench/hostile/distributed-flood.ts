/**
 * The distributed application-layer flood against a started `tps serve`: 1,000 loopback sources
 * (a kept-alive connection each) send GETs as fast as `BENCH_CONCURRENCY` requests in flight allow,
 * first to a proxy without `appDdos`, then to one with `appDdos` AUTO. Prints per row: requests
 * answered per second, requests that reached the origin per second, challenge pages per second,
 * and the service's CPU per answered request (its process CPU, all threads, from /metrics). During
 * the protected row, a headless Chromium opens a page: its time to clearance (challenge solved,
 * the origin's page shown) at the default difficulty, TPS_APP_DDOS_CHALLENGE_BITS 14 (plus the
 * attack's extra bits).
 *
 *   node bench/hostile/distributed-flood.ts
 *   BENCH_SECONDS=10 BENCH_CONCURRENCY=64 BENCH_WORKERS=2 BENCH_THRESHOLD=100 node bench/hostile/distributed-flood.ts
 *
 * Loopback addresses: 127.0.7.1 front end, 127.0.7.2 origin, sources 127.8.0.0/22. The client runs
 * in this process on the same machine: the figures say what the service spends, not what a real
 * botnet could send.
 */
import http from 'node:http';
import type net from 'node:net';
import { launchBrowser } from '../../test/support/browser.ts';
import { TenantApi } from '../../test/support/api-client.ts';
import { freePort } from '../../test/support/ports.ts';
import { createTenant, startTps, type Tps } from '../../test/support/tps.ts';
import { waitFor } from '../../test/support/wait.ts';
import { fixed, printTable } from '../support/table.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 2);
const THRESHOLD = Number(process.env.BENCH_THRESHOLD ?? 100);
const FRONTEND = '127.0.7.1';
const ORIGIN = '127.0.7.2';
const SOURCES = Array.from({ length: 1000 }, (_, i) => `127.8.${Math.floor(i / 250)}.${(i % 250) + 1}`);

async function cpuSeconds(tps: Tps): Promise<number> {
  const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('tps_process_cpu_seconds_total '));
  return Number(line?.split(' ')[1] ?? NaN);
}

interface FloodFigures {
  answered: number;
  challenged: number;
  originHits: number;
  cpuSeconds: number;
  seconds: number;
}

async function flood(tps: Tps, url: string, origin: { hits: number }, during?: () => Promise<void>): Promise<FloodFigures> {
  const agents = SOURCES.map((localAddress) => new http.Agent({ keepAlive: true, maxSockets: 1, localAddress }));
  let answered = 0;
  let challenged = 0;
  let next = 0;
  const stop = { done: false };
  const one = (agent: http.Agent) =>
    new Promise<void>((resolve) => {
      const request = http.get(url, { agent, headers: { 'user-agent': 'bench/1' } }, (response) => {
        if (response.headers['tps-mitigated'] === 'challenge') challenged++;
        response.resume();
        response.on('end', () => {
          answered++;
          resolve();
        });
      });
      request.on('error', () => resolve());
    });
  const originBefore = origin.hits;
  const cpuBefore = await cpuSeconds(tps);
  const started = performance.now();
  const clients = Array.from({ length: CONCURRENCY }, async () => {
    while (!stop.done) await one(agents[next++ % agents.length]!);
  });
  const side = during?.();
  await new Promise((resolve) => setTimeout(resolve, SECONDS * 1000));
  stop.done = true;
  await Promise.all(clients);
  const seconds = (performance.now() - started) / 1000;
  const cpu = (await cpuSeconds(tps)) - cpuBefore;
  await side;
  for (const agent of agents) agent.destroy();
  return { answered, challenged, originHits: origin.hits - originBefore, cpuSeconds: cpu, seconds };
}

async function main(): Promise<void> {
  const origin = { hits: 0 };
  const server = http.createServer((_request, response) => {
    origin.hits++;
    response.setHeader('content-type', 'text/html');
    response.end('<!doctype html><title>origin</title><p id="origin">origin</p>');
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, ORIGIN, resolve));
  const originPort = (server.address() as net.AddressInfo).port;
  const tps = await startTps({
    env: {
      TPS_EDGE: 'true',
      TPS_EDGE_WORKERS: String(WORKERS),
      TPS_FRONTEND_IPS: FRONTEND,
      TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      // Every unverified request is challenged (none blocked): the row measures the challenge's cost.
      TPS_APP_DDOS_MAX_UNSOLVED: '100000',
    },
  });
  const rows: string[][] = [];
  let clearanceMs = NaN;
  try {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const create = async (appDdos: object | undefined) => {
      const port = await freePort(FRONTEND);
      const created = await api.call('POST', '/api/v2/traffic-mgmt/traffic-configs', {
        data: {
          type: 'httpProxy',
          attributes: {
            frontend: { ipv4: FRONTEND, port },
            backend: { hosts: [{ address: ORIGIN, port: originPort }] },
            ...(appDdos && { appDdos }),
          },
        },
      });
      if (created.status !== 201) throw new Error(`proxy not created: ${JSON.stringify(created.body)}`);
      const id = created.body.data.id as string;
      await waitFor(
        'ACTIVE',
        async () => (await api.get(`/api/v2/traffic-mgmt/traffic-configs/${id}`)).body.data.attributes.status === 'ACTIVE',
        {
          timeoutMs: 60_000,
        },
      );
      return `http://${FRONTEND}:${port}`;
    };
    const unprotected = await create(undefined);
    const protectedUrl = await create({ mode: 'AUTO', threshold: THRESHOLD });

    const row = (name: string, f: FloodFigures) => [
      name,
      fixed(f.answered / f.seconds, 0),
      fixed(f.originHits / f.seconds, 0),
      fixed(f.challenged / f.seconds, 0),
      fixed((f.cpuSeconds * 1e6) / Math.max(1, f.answered), 0),
    ];
    rows.push(row('unprotected', await flood(tps, `${unprotected}/`, origin)));
    const browserRun = async () => {
      // Let the attack be detected first.
      await new Promise((resolve) => setTimeout(resolve, Math.min(3000, (SECONDS * 1000) / 3)));
      const browser = await launchBrowser();
      try {
        const started = performance.now();
        await browser.page.goto(`${protectedUrl}/welcome`);
        await browser.page.locator('#origin').waitFor({ timeout: 60_000 });
        clearanceMs = performance.now() - started;
      } finally {
        await browser.close();
      }
    };
    rows.push(row(`appDdos AUTO (threshold ${THRESHOLD}/s)`, await flood(tps, `${protectedUrl}/`, origin, browserRun)));
  } finally {
    await tps.stop();
    server.close();
  }
  printTable(['proxy', 'answered/s', 'origin/s', 'challenged/s', 'CPU µs/request'], rows);
  console.log(`browser time to clearance during the attack: ${fixed(clearanceMs, 0)} ms`);
}

await main();
