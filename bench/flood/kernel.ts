/**
 * bench/flood part (b): the same flood with kernel blocking on, inside a network namespace of its
 * own. `runKernelPart` (called by run.ts) re-runs this file under `unshare -n`; inside, it brings
 * loopback up, starts `tps serve` (SQLite store, the edge on, TPS_KERNEL_BLOCKING=nftables, pinned
 * to the proxy core), creates a proxy with a rate limit through the API, then measures for
 * `seconds` each, with a benign client (another source, 20 requests/s, under the limit) running
 * throughout:
 *
 *   idle    no flood: the service's CPU/s and the benign client's success rate and p99;
 *   flood   wrk -c64 from another source (pinned to the load core): the same figures, and the
 *           packets the service's nftables table dropped (`nft -j list table inet tps`).
 *
 * Goal: CPU during the flood within 10 % of idle, benign p99 unchanged. When the service has no
 * kernel blocking (no table `inet tps` after starting with the setting) or the namespace cannot be
 * made, it says so and measures nothing.
 *
 *   node bench/flood/kernel.ts --inside '<json: { seconds, proxyCpus, loadCpus }>'   (run.ts does this)
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { TenantApi } from '../../test/support/api-client.ts';
import { freePort } from '../../test/support/ports.ts';
import { createTenant, startTps, type Tps } from '../../test/support/tps.ts';
import { waitFor } from '../../test/support/wait.ts';
import { childPids, processTree, processCpuSeconds } from '../support/cpu.ts';
import { hasCommand } from '../support/debian.ts';
import { fixed, printTable } from '../support/table.ts';
import { runWrk } from '../support/wrk.ts';

interface Options {
  seconds: number;
  proxyCpus: string;
  loadCpus: string;
  log: (message: string) => void;
}

interface Window {
  cpuPerSecond: number;
  benignSent: number;
  benignOk: number;
  benignP99Ms: number;
  dropped: number;
  floodRequests: number;
}

type Outcome = { skipped: string } | { idle: Window; flood: Window };

const FRONTEND = '127.0.0.81';
const ORIGIN = '127.0.0.82';
const BENIGN = '127.0.0.83';
const BENIGN_PER_SECOND = 20;

/** Called by run.ts: runs the part in a new network namespace and prints its table. */
export async function runKernelPart(options: Options): Promise<void> {
  console.log('\n(b) one source flooding with kernel blocking on (TPS_KERNEL_BLOCKING=nftables), in a network namespace');
  if (!hasCommand('nft')) return console.log('(b) skipped: no `nft` command (Debian package nftables)');
  if (spawnSync('unshare', ['-n', 'true']).status !== 0) return console.log('(b) skipped: cannot create a network namespace (unshare -n)');
  const inside = spawnSync(
    'unshare',
    [
      '-n',
      process.execPath,
      fileURLToPath(import.meta.url),
      '--inside',
      JSON.stringify({ seconds: options.seconds, proxyCpus: options.proxyCpus, loadCpus: options.loadCpus }),
    ],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 },
  );
  const line = inside.stdout.trim().split('\n').at(-1) ?? '';
  let outcome: Outcome;
  try {
    outcome = JSON.parse(line) as Outcome;
  } catch {
    return console.log(`(b) failed (exit ${inside.status}): ${inside.stdout.slice(-500)}`);
  }
  if ('skipped' in outcome) return console.log(`(b) skipped: ${outcome.skipped}`);
  const { idle, flood } = outcome;
  printTable(
    ['window', 'tps CPU/s', 'packets dropped', 'flood requests answered', 'benign ok', 'benign p99 ms'],
    [idle, flood].map((w, i) => [
      i === 0 ? 'idle' : 'flood',
      fixed(w.cpuPerSecond, 3),
      String(w.dropped),
      String(w.floodRequests),
      `${w.benignOk}/${w.benignSent}`,
      fixed(w.benignP99Ms, 2),
    ]),
  );
  const cpuGoal = flood.cpuPerSecond <= idle.cpuPerSecond * 1.1;
  console.log(
    `goal: CPU during the flood within 10 % of idle -> ${fixed(flood.cpuPerSecond, 3)} vs ${fixed(idle.cpuPerSecond, 3)} ${cpuGoal ? 'MET' : 'NOT MET'}; ` +
      `benign p99 ${fixed(flood.benignP99Ms, 2)} vs ${fixed(idle.benignP99Ms, 2)} ms, ${flood.benignOk}/${flood.benignSent} ok`,
  );
}

/** Packets counted by every counter of the service's table, or undefined when there is no such table. */
function droppedPackets(): number | undefined {
  const listed = spawnSync('nft', ['-j', 'list', 'table', 'inet', 'tps'], { encoding: 'utf8' });
  if (listed.status !== 0) return undefined;
  let packets = 0;
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) for (const item of value) walk(item);
    else if (value !== null && typeof value === 'object') {
      const record = value as Record<string, unknown>;
      if (typeof record.counter === 'object' && record.counter !== null)
        packets += Number((record.counter as { packets?: number }).packets ?? 0);
      for (const [key, item] of Object.entries(record)) if (key !== 'counter') walk(item);
    }
  };
  walk(JSON.parse(listed.stdout));
  return packets;
}

/** A client under the limit: GET / every 1/BENIGN_PER_SECOND s from BENIGN, for `seconds`. */
async function benign(url: string, seconds: number): Promise<{ sent: number; ok: number; p99Ms: number }> {
  const latencies: number[] = [];
  let sent = 0;
  let ok = 0;
  const deadline = performance.now() + seconds * 1000;
  while (performance.now() < deadline) {
    const started = performance.now();
    sent++;
    const status = await new Promise<number>((resolve) => {
      const request = http.get(url, { agent: false, localAddress: BENIGN, timeout: 5000 }, (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
      });
      request.on('timeout', () => request.destroy());
      request.on('error', () => resolve(0));
    });
    const took = performance.now() - started;
    latencies.push(took);
    if (status === 200) ok++;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 1000 / BENIGN_PER_SECOND - took)));
  }
  latencies.sort((a, b) => a - b);
  return { sent, ok, p99Ms: latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))] ?? NaN };
}

async function inside(settings: { seconds: number; proxyCpus: string; loadCpus: string }): Promise<Outcome> {
  execFileSync('ip', ['link', 'set', 'lo', 'up']);
  const origin = http.createServer((_request, response) => response.end('ok\n'));
  await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
  const originPort = (origin.address() as { port: number }).port;
  let tps: Tps | undefined;
  try {
    tps = await startTps({
      env: {
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_KERNEL_BLOCKING: 'nftables',
      },
    });
    if (droppedPackets() === undefined) {
      return {
        skipped: 'this build has no kernel blocking (no nftables table `inet tps` after starting with TPS_KERNEL_BLOCKING=nftables)',
      };
    }
    // startTps spawns `node bin/tps.js serve`: that child and its descendants are the service.
    const service =
      childPids(process.pid).find((pid) => {
        try {
          return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('tps.js');
        } catch {
          return false;
        }
      }) ?? 0;
    for (const pid of processTree(service)) spawnSync('taskset', ['-a', '-p', '-c', settings.proxyCpus, String(pid)], { stdio: 'ignore' });
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', '/api/v2/traffic-mgmt/traffic-configs', {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: originPort }] },
          rateLimiting: { thresholds: [{ requests: 100, periodSeconds: 1 }], blockSeconds: 600 },
        },
      },
    });
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () =>
      (await api.get(`/api/v2/traffic-mgmt/traffic-configs/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined,
    );
    const url = `http://${FRONTEND}:${port}/`;
    const cpu = () => processTree(service).reduce((sum, pid) => sum + processCpuSeconds(pid), 0);

    const measure = async (flood: boolean): Promise<Window> => {
      const droppedBefore = droppedPackets() ?? 0;
      const wrk = flood ? runWrk({ url, seconds: settings.seconds + 2, connections: 64, cpus: settings.loadCpus }) : undefined;
      // The first seconds of a flood are the escalation (429s, then the kernel): measured after them.
      if (flood) await new Promise((resolve) => setTimeout(resolve, 2000));
      const cpuBefore = cpu();
      const started = performance.now();
      const client = await benign(url, settings.seconds);
      const cpuPerSecond = (cpu() - cpuBefore) / ((performance.now() - started) / 1000);
      const floodResult = await wrk;
      return {
        cpuPerSecond,
        benignSent: client.sent,
        benignOk: client.ok,
        benignP99Ms: client.p99Ms,
        dropped: (droppedPackets() ?? 0) - droppedBefore,
        floodRequests: floodResult?.requests ?? 0,
      };
    };
    // The worker's WAF engine starts with its first request (a second or more of CPU): the idle
    // window is measured after that, or it would stand for the start, not for idle.
    await benign(url, 3);
    const idle = await measure(false);
    const flood = await measure(true);
    return { idle, flood };
  } finally {
    await tps?.stop();
    origin.close();
  }
}

if (process.argv[2] === '--inside') {
  const outcome = await inside(JSON.parse(process.argv[3] ?? '{}'));
  process.stdout.write(`${JSON.stringify(outcome)}\n`);
  process.exit(0);
}
