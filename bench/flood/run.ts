/**
 * Flood benchmark: what refusing a source that is already blocked costs us, against nginx
 * `limit_req` (1 worker, `limit_req_status 429`), in one sitting. See README.md.
 *
 *   (a) one source (wrk -t1 -c64) refused by the rate limit, kernel blocking off: refusals/s and CPU
 *       us per refusal of each proxy, the ratio (goal: >= 1.0x nginx in CPU per refusal);
 *   (b) the same with kernel blocking on (TPS_KERNEL_BLOCKING=nftables), inside a network namespace
 *       the bench creates: packets dropped, Node CPU/s during the flood against idle, a benign
 *       client's success rate and p99 (goal: CPU within 10 % of idle, benign p99 unchanged);
 *       skipped with a message where the service has no kernel blocking or namespaces are refused;
 *   (c) 1,000 sources (127.0.1.0-127.0.4.231), each over its limit, from bench/flood/load.ts.
 *
 * Each proxy is pinned to the same core (taskset), the load to the other one; CPU is read from
 * /proc. Rounds alternate nginx and ours; the median round counts.
 *
 *   node bench/flood/run.ts
 *   BENCH_SECONDS=5 BENCH_ROUNDS=3 BENCH_PARTS=a,c node bench/flood/run.ts
 *   BENCH_CPU_PROF=/tmp/prof node bench/flood/run.ts     # our proxy under --cpu-prof
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { allowedCpus, processCpuSeconds } from '../support/cpu.ts';
import { productEnvironment } from '../support/allocator.ts';
import { PRODUCT_V8_FLAGS } from '../../src/cli/runtime.ts';
import { systemCpuSeconds } from './system-cpu.ts';
import { hasCommand, installDebianPackages } from '../support/debian.ts';
import { freePort, waitForPort } from '../support/net.ts';
import { originLocation, startNginx, writeNginxConf, type NginxProcess } from '../support/nginx.ts';
import { fixed, median, printTable, ratio } from '../support/table.ts';
import { runWrk, type WrkResult } from '../support/wrk.ts';
import { runKernelPart } from './kernel.ts';

const here = fileURLToPath(new URL('.', import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const PARTS = new Set((process.env.BENCH_PARTS ?? 'a,b,c').split(','));
const SOURCES = Number(process.env.BENCH_SOURCES ?? 1000);
const CPU_PROF = process.env.BENCH_CPU_PROF;
/** Another checkout (with node_modules) whose proxy runs as `before` in the same rounds. */
const BASELINE = process.env.BENCH_BASELINE;
const WARMUP_SECONDS = 2;
const ORIGIN_IP = '127.0.0.70';
const NGINX_IP = '127.0.0.71';
const TPS_IP = '127.0.0.72';
const BEFORE_IP = '127.0.0.73';
const JAVASCRIPT_IP = '127.0.0.74';
/** Also this tree's proxy without the native refusal engine (`tps-js`, TPS_EARLY_REFUSAL_ENGINE=javascript). */
const JAVASCRIPT_SIDE = process.env.BENCH_JAVASCRIPT_SIDE === '1';

function log(message: string): void {
  process.stderr.write(`${message}\n`);
}

/** The core the proxies share and the core(s) the load runs on. */
function cores(): { proxy: string; load: string } {
  const cpus = allowedCpus();
  if (cpus.length < 2) return { proxy: String(cpus[0] ?? 0), load: String(cpus[0] ?? 0) };
  return { proxy: String(cpus[0]), load: cpus.slice(1).join(',') };
}

export interface TpsChild {
  readonly pid: number;
  stats(): Promise<{ episodes: number; completed: number }>;
  stop(): Promise<void>;
}

/** Starts bench/flood/tps-proxy.ts pinned to `cpus`, resolves once it listens. */
export async function startTps(
  address: string,
  port: number,
  origin: string,
  originPort: number,
  cpus: string,
  checkout = path.resolve(here, '../..'),
  env: NodeJS.ProcessEnv = {},
): Promise<TpsChild> {
  const profile = CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${CPU_PROF}`] : [];
  const child: ChildProcess = spawn(
    'taskset',
    [
      '-c',
      cpus,
      process.execPath,
      // The product's runtime, as an edge worker runs (src/cli/runtime.ts): its V8 flags, jemalloc.
      ...PRODUCT_V8_FLAGS,
      ...profile,
      path.join(checkout, 'bench/flood/tps-proxy.ts'),
      JSON.stringify({ address, port, origin, originPort }),
    ],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...productEnvironment(), ...env } },
  );
  await new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`tps-proxy exited with ${code}`)));
    child.on('message', (m: { type: string }) => m.type === 'ready' && resolve());
  });
  return {
    pid: child.pid!,
    stats: () =>
      new Promise((resolve) => {
        const onMessage = (m: { type: string; episodes: number; completed: number }) => {
          if (m.type !== 'stats') return;
          child.off('message', onMessage);
          resolve(m);
        };
        child.on('message', onMessage);
        child.send({ type: 'stats' });
      }),
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.send({ type: 'exit' });
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** nginx as the proxy under test: `limit_req` one request a minute per address, 429 past it. */
function nginxFloodConf(dir: string, listen: string, origin: string): string {
  const conf = writeNginxConf({
    dir,
    name: 'limit',
    upstreams: [{ name: 'origin', server: origin, keepalive: 16 }],
    servers: [
      {
        listen,
        directives: 'limit_req zone=flood;\nlimit_req_status 429;\nlimit_req_log_level info;',
        location: 'proxy_pass http://origin;\n      proxy_http_version 1.1;\n      proxy_set_header Connection "";',
      },
    ],
  });
  // writeNginxConf has no http-level directives of its own: the zone goes in front of the upstream.
  const text = fs
    .readFileSync(conf, 'utf8')
    .replace(/^(\s*upstream )/m, '  limit_req_zone $binary_remote_addr zone=flood:10m rate=1r/m;\n$1');
  fs.writeFileSync(conf, text);
  return conf;
}

/** One of our proxies under test: this tree's (`tps`), or the `BENCH_BASELINE` checkout's (`before`). */
interface Ours {
  name: string;
  host: string;
  port: number;
  child: TpsChild;
}

interface Row {
  name: string;
  refusalsPerSecond: number;
  cpuUsPerRefusal: number;
  /** Of which system time (the kernel: reads, writes, the loopback's TCP). */
  sysUsPerRefusal: number;
  p99Ms: number;
  other: number;
}

/** Part (a): one source, wrk -c64, every answer a 429. */
async function partOne(nginxUrl: string, nginxPid: () => number, ours: readonly Ours[], loadCpus: string): Promise<Row[]> {
  const targets = [
    { name: 'nginx', url: nginxUrl, cpu: () => processCpuSeconds(nginxPid()), sys: () => systemCpuSeconds(nginxPid()) },
    ...ours.map((o) => ({
      name: o.name,
      url: `http://${o.host}:${o.port}/`,
      cpu: () => processCpuSeconds(o.child.pid),
      sys: () => systemCpuSeconds(o.child.pid),
    })),
  ];
  for (const target of targets) await runWrk({ url: target.url, seconds: WARMUP_SECONDS, connections: CONNECTIONS, cpus: loadCpus });
  const results = new Map<string, Row[]>(targets.map((t) => [t.name, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    for (const target of round % 2 === 1 ? targets : [...targets].reverse()) {
      const before = target.cpu();
      const sysBefore = target.sys();
      const r: WrkResult = await runWrk({ url: target.url, seconds: SECONDS, connections: CONNECTIONS, cpus: loadCpus });
      const cpu = target.cpu() - before;
      const sys = target.sys() - sysBefore;
      // Every answer must be the refusal: a 2xx would be a request let through.
      const refused = r.non2xx;
      const row = {
        name: target.name,
        refusalsPerSecond: (r.rps * refused) / Math.max(1, r.requests),
        cpuUsPerRefusal: (cpu * 1e6) / Math.max(1, refused),
        sysUsPerRefusal: (sys * 1e6) / Math.max(1, refused),
        p99Ms: r.p99Ms,
        other: r.requests - refused,
      };
      results.get(target.name)!.push(row);
      log(
        `(a) round ${round} ${target.name.padEnd(5)} ${row.refusalsPerSecond.toFixed(0).padStart(7)} refusals/s  ` +
          `${row.cpuUsPerRefusal.toFixed(1)} us CPU each (${row.sysUsPerRefusal.toFixed(1)} in the kernel)  p99 ${r.p99Ms.toFixed(2)} ms` +
          (row.other ? `  (${row.other} answers other than 4xx/5xx)` : '') +
          (r.socketErrors ? `  (${r.socketErrors} socket errors)` : ''),
      );
    }
  }
  return targets.map((t) => {
    const rows = results.get(t.name)!;
    return {
      name: t.name,
      refusalsPerSecond: median(rows.map((r) => r.refusalsPerSecond)),
      cpuUsPerRefusal: median(rows.map((r) => r.cpuUsPerRefusal)),
      sysUsPerRefusal: median(rows.map((r) => r.sysUsPerRefusal)),
      p99Ms: median(rows.map((r) => r.p99Ms)),
      other: rows.reduce((sum, r) => sum + r.other, 0),
    };
  });
}

interface LoadReport {
  responses: number;
  refused: number;
  passed: number;
  failed: number;
  seconds: number;
}

/** Runs bench/flood/load.ts pinned to `cpus` and resolves with its report. */
function runLoad(host: string, port: number, sources: number, seconds: number, cpus: string): Promise<LoadReport> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'taskset',
      ['-c', cpus, process.execPath, path.join(here, 'load.ts'), JSON.stringify({ host, port, sources, seconds })],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        resolve(JSON.parse(out) as LoadReport);
      } catch {
        reject(new Error(`load.ts exited with ${code}: ${out}`));
      }
    });
  });
}

/** Part (c): `SOURCES` sources, one keep-alive connection each, every one over its limit. */
async function partThree(
  nginxTarget: { host: string; port: number },
  nginxPid: () => number,
  ours: readonly Ours[],
  loadCpus: string,
): Promise<Row[]> {
  const targets = [
    { name: 'nginx', ...nginxTarget, cpu: () => processCpuSeconds(nginxPid()), sys: () => systemCpuSeconds(nginxPid()) },
    ...ours.map((o) => ({
      name: o.name,
      host: o.host,
      port: o.port,
      cpu: () => processCpuSeconds(o.child.pid),
      sys: () => systemCpuSeconds(o.child.pid),
    })),
  ];
  // Every source crosses its limit in the warm-up: the rounds measure refusals of blocked sources.
  for (const target of targets) await runLoad(target.host, target.port, SOURCES, WARMUP_SECONDS, loadCpus);
  const results = new Map<string, Row[]>(targets.map((t) => [t.name, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    for (const target of round % 2 === 1 ? targets : [...targets].reverse()) {
      const before = target.cpu();
      const sysBefore = target.sys();
      const r = await runLoad(target.host, target.port, SOURCES, SECONDS, loadCpus);
      const cpu = target.cpu() - before;
      const sys = target.sys() - sysBefore;
      const row = {
        name: target.name,
        refusalsPerSecond: r.refused / r.seconds,
        cpuUsPerRefusal: (cpu * 1e6) / Math.max(1, r.refused),
        sysUsPerRefusal: (sys * 1e6) / Math.max(1, r.refused),
        p99Ms: NaN,
        other: r.passed + r.failed,
      };
      results.get(target.name)!.push(row);
      log(
        `(c) round ${round} ${target.name.padEnd(5)} ${row.refusalsPerSecond.toFixed(0).padStart(7)} refusals/s  ` +
          `${row.cpuUsPerRefusal.toFixed(1)} us CPU each (${row.sysUsPerRefusal.toFixed(1)} in the kernel)` +
          (r.passed ? `  (${r.passed} passed)` : '') +
          (r.failed ? `  (${r.failed} connections failed)` : ''),
      );
    }
  }
  return targets.map((t) => {
    const rows = results.get(t.name)!;
    return {
      name: t.name,
      refusalsPerSecond: median(rows.map((r) => r.refusalsPerSecond)),
      cpuUsPerRefusal: median(rows.map((r) => r.cpuUsPerRefusal)),
      sysUsPerRefusal: median(rows.map((r) => r.sysUsPerRefusal)),
      p99Ms: NaN,
      other: rows.reduce((sum, r) => sum + r.other, 0),
    };
  });
}

function report(title: string, rows: Row[]): void {
  const nginx = rows.find((r) => r.name === 'nginx')!;
  const tps = rows.find((r) => r.name === 'tps')!;
  console.log(`\n${title}`);
  printTable(
    ['target', 'refusals/s', 'CPU us/refusal', 'of it kernel', 'p99 ms', 'vs nginx refusals/s', 'vs nginx CPU'],
    rows.map((r) => [
      r.name,
      r.refusalsPerSecond.toFixed(0),
      fixed(r.cpuUsPerRefusal, 1),
      fixed(r.sysUsPerRefusal, 1),
      fixed(r.p99Ms, 2),
      ratio(r.refusalsPerSecond, nginx.refusalsPerSecond),
      // Higher is better: nginx's CPU per refusal over ours.
      ratio(nginx.cpuUsPerRefusal, r.cpuUsPerRefusal),
    ]),
  );
  const cpuRatio = nginx.cpuUsPerRefusal / tps.cpuUsPerRefusal;
  console.log(`goal: tps >= 1.0x nginx in CPU per refusal -> ${cpuRatio.toFixed(2)}x ${cpuRatio >= 1 ? 'MET' : 'NOT MET'}`);
  const before = rows.find((r) => r.name === 'before');
  if (before !== undefined)
    console.log(`tps against before (${BASELINE}): ${ratio(before.cpuUsPerRefusal, tps.cpuUsPerRefusal)} less CPU per refusal`);
}

async function main(): Promise<void> {
  const started = performance.now();
  installDebianPackages(['nginx', 'wrk'].filter((c) => !hasCommand(c)));
  const { proxy: proxyCpus, load: loadCpus } = cores();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-bench-flood-'));
  fs.chmodSync(dir, 0o755);
  const originAddress = `${ORIGIN_IP}:${await freePort(ORIGIN_IP)}`;
  const nginxPort = await freePort(NGINX_IP);
  const tpsPort = await freePort(TPS_IP);
  const children: NginxProcess[] = [];
  let tps: TpsChild | undefined;
  let before: TpsChild | undefined;
  let javascript: TpsChild | undefined;
  // Interrupted, the bench still stops what it started.
  const interrupted = async (): Promise<void> => {
    await Promise.allSettled([tps?.stop(), before?.stop(), javascript?.stop(), ...children.map((child) => child.stop())]);
    fs.rmSync(dir, { recursive: true, force: true });
    process.exit(130);
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  try {
    children.push(
      await startNginx(
        writeNginxConf({ dir, name: 'origin', servers: [{ listen: originAddress, location: originLocation('ok\n') }] }),
        dir,
        [originAddress],
        { cpus: loadCpus },
      ),
    );
    const nginx = await startNginx(nginxFloodConf(dir, `${NGINX_IP}:${nginxPort}`, originAddress), dir, [`${NGINX_IP}:${nginxPort}`], {
      cpus: proxyCpus,
    });
    children.push(nginx);
    // nginx's master accepts (in the kernel's backlog) before its worker is forked: wait for it.
    let nginxWorker = 0;
    for (let attempt = 0; attempt < 100 && nginxWorker === 0; attempt++) {
      nginxWorker = nginx.workerPids()[0] ?? 0;
      if (nginxWorker === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    if (nginxWorker === 0) throw new Error('nginx started no worker');
    const originPort = Number(originAddress.split(':')[1]);
    tps = await startTps(TPS_IP, tpsPort, ORIGIN_IP, originPort, proxyCpus);
    await waitForPort(`${TPS_IP}:${tpsPort}`);
    const ours: Ours[] = [{ name: 'tps', host: TPS_IP, port: tpsPort, child: tps }];
    if (BASELINE !== undefined) {
      // The baseline may predate this bench: its proxy runs our child script against its own sources.
      fs.mkdirSync(path.join(BASELINE, 'bench/flood'), { recursive: true });
      fs.copyFileSync(path.join(here, 'tps-proxy.ts'), path.join(BASELINE, 'bench/flood/tps-proxy.ts'));
      const beforePort = await freePort(BEFORE_IP);
      before = await startTps(BEFORE_IP, beforePort, ORIGIN_IP, originPort, proxyCpus, BASELINE);
      ours.push({ name: 'before', host: BEFORE_IP, port: beforePort, child: before });
    }
    if (JAVASCRIPT_SIDE) {
      const javascriptPort = await freePort(JAVASCRIPT_IP);
      javascript = await startTps(JAVASCRIPT_IP, javascriptPort, ORIGIN_IP, originPort, proxyCpus, undefined, {
        TPS_EARLY_REFUSAL_ENGINE: 'javascript',
      });
      ours.push({ name: 'tps-js', host: JAVASCRIPT_IP, port: javascriptPort, child: javascript });
    }
    console.log(`proxies on CPU ${proxyCpus}, load on CPU ${loadCpus}; ${os.cpus().length} cores, Node ${process.version}`);

    if (PARTS.has('a')) {
      const rows = await partOne(`http://${NGINX_IP}:${nginxPort}/`, () => nginxWorker, ours, loadCpus);
      report(`(a) one source refused, kernel blocking off: wrk -t1 -c${CONNECTIONS}, ${ROUNDS} rounds of ${SECONDS} s, median`, rows);
    }
    if (PARTS.has('c')) {
      const rows = await partThree({ host: NGINX_IP, port: nginxPort }, () => nginxWorker, ours, loadCpus);
      report(`(c) ${SOURCES} sources, each over its limit, one keep-alive connection each: ${ROUNDS} rounds of ${SECONDS} s, median`, rows);
    }
    const stats = await tps.stats();
    console.log(
      `\ntps: ${stats.episodes} APP_DDOS_ATTACK events recorded (one per source), ${stats.completed} requests through the phases`,
    );
    if (PARTS.has('b')) await runKernelPart({ seconds: SECONDS, proxyCpus, loadCpus, log });
    console.log(`total ${((performance.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    await tps?.stop();
    await before?.stop();
    await javascript?.stop();
    await Promise.all(children.map((child) => child.stop()));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
