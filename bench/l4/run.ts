/**
 * Layer 4 benchmark, in one sitting: bulk throughput (MB/s, upload and download) and short
 * connections per second, through our L4Proxy (one Node thread), through HAProxy 2.6 (`mode tcp`,
 * `balance leastconn`, `nbthread 1`) and direct to the origin, all on loopback, with ratios.
 * See README.md.
 *
 *   node bench/l4/run.ts [--seconds 2] [--rounds 3] [--no-install] [--baseline <checkout>]
 *                        [--baseline-flags '<node flags>']
 *
 * `--baseline <checkout>` (with its node_modules, e.g. a `git worktree` of an older commit) adds
 * that checkout's proxy (its bench/l4/our-proxy.ts) as one more target in the same rounds, and
 * prints this tree's figures against it. `--baseline-flags` gives that target more Node/V8 flags
 * (a runtime setting measured against this tree's in the same rounds: `--baseline . --baseline-flags
 * --single-threaded-gc`).
 *
 * Our proxies run as `tps` runs: the product's V8 flags (src/cli/runtime.ts) and its allocator
 * (jemalloc when installed; TPS_MALLOC=system: glibc's malloc), the baseline's with this tree's.
 *
 * Installs HAProxy from Debian when it is missing (needs root; a policy-rc.d keeps the package from
 * starting its service). Load generators are separate processes, as is the origin. The targets are
 * measured in interleaved rounds and the median of each figure is printed, because the machine's
 * cores are shared (load, origin, proxy, and whatever else runs).
 */
import { freePort } from '../../test/support/ports.ts';
import { hasCommand, installDebianPackages } from '../support/debian.ts';
import { processCpuSeconds } from '../support/cpu.ts';
import { mallocOf, productEnvironment } from '../support/allocator.ts';
import { PRODUCT_V8_FLAGS } from '../../src/cli/runtime.ts';
import { median } from '../support/table.ts';
import { fork, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const args = process.argv.slice(2);
const option = (name: string, fallback: number) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) || fallback : fallback);
const seconds = option('--seconds', 2);
const rounds = option('--rounds', 3);
const install = !args.includes('--no-install');
const baselineCheckout = args.includes('--baseline') ? resolve(args[args.indexOf('--baseline') + 1] ?? '') : undefined;
const baselineFlags = args.includes('--baseline-flags')
  ? (args[args.indexOf('--baseline-flags') + 1] ?? '').split(' ').filter(Boolean)
  : [];
const WARMUP_SECONDS = 0.5;
const LOAD_PROCESSES = 2;
const STREAMS_PER_PROCESS = 2;
const CONCURRENCY_PER_PROCESS = 32;

const ORIGIN_ADDRESS = '127.0.0.31';
const OURS_ADDRESS = '127.0.0.21';
const HAPROXY_ADDRESS = '127.0.0.22';

interface Endpoint {
  host: string;
  port: number;
}

interface Target {
  name: string;
  upload: Endpoint;
  download: Endpoint;
  connections: Endpoint;
  /** The proxy process whose CPU time is reported; undefined for direct. */
  pid?: number;
}

/** A rate and the proxy's CPU over the same window (cores: 1 = one core busy). */
interface Rate {
  perSecond: number;
  cpu?: number;
}

interface Measurement {
  upload: Rate;
  download: Rate;
  connections: Rate;
  /** Short connections that closed without an answer. */
  failed: number;
}

interface OriginPorts {
  sinkPort: number;
  sourcePort: number;
  echoPort: number;
}

function log(message: string): void {
  process.stderr.write(`${message}\n`);
}

function ensureHaproxy(): string | undefined {
  if (!hasCommand('haproxy')) {
    if (!install) return undefined;
    try {
      installDebianPackages(['haproxy']);
    } catch {
      return undefined;
    }
  }
  return hasCommand('haproxy') ? 'haproxy' : undefined;
}

function waitForMessage<T>(child: ChildProcess, type: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: { type: string }) => {
      if (message.type !== type) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(message as T);
    };
    const onExit = (code: number | null) => reject(new Error(`child exited (${code}) before '${type}'`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/** Polls until something accepts on address:port (HAProxy gives no readiness signal in -db mode). */
async function waitUntilListening(address: string, port: number, child: ChildProcess): Promise<void> {
  for (let attempt = 0; attempt < 100; attempt++) {
    if (child.exitCode !== null) throw new Error(`process exited with ${child.exitCode}`);
    const accepted = await new Promise<boolean>((resolve) => {
      const socket = connect({ host: address, port }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.on('error', () => resolve(false));
    });
    if (accepted) return;
    await sleep(50);
  }
  throw new Error(`nothing listens on ${address}:${port}`);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** CPU seconds (user + system, all threads) the process has used. */
const cpuSeconds = (pid: number | undefined): number => (pid === undefined ? 0 : processCpuSeconds(pid));

function exited(child: ChildProcess): Promise<unknown> {
  const gone = child.exitCode !== null || child.signalCode !== null;
  return gone ? Promise.resolve() : new Promise((resolve) => child.once('exit', resolve));
}

/** Bytes per second over the window, from a counter read at its start and end. */
async function measureBytes(target: Target, load: ChildProcess[], count: () => Promise<number>): Promise<Rate> {
  await sleep(WARMUP_SECONDS * 1000);
  const before = await count();
  const cpuBefore = cpuSeconds(target.pid);
  const started = performance.now();
  await sleep(seconds * 1000);
  const after = await count();
  const elapsed = (performance.now() - started) / 1000;
  const cpu = target.pid === undefined ? undefined : (cpuSeconds(target.pid) - cpuBefore) / elapsed;
  await Promise.all(load.map(exited));
  return { perSecond: (after - before) / elapsed, cpu };
}

function askBytes(child: ChildProcess): Promise<number> {
  const answer = waitForMessage<{ bytes: number }>(child, 'bytes');
  child.send({ type: 'bytes' });
  return answer.then((message) => message.bytes);
}

function startLoad(mode: string, endpoint: Endpoint, ...rest: number[]): ChildProcess[] {
  return Array.from({ length: LOAD_PROCESSES }, () =>
    fork(join(here, 'load.ts'), [mode, endpoint.host, String(endpoint.port), ...rest.map(String)]),
  );
}

function measureUpload(target: Target, origin: ChildProcess): Promise<Rate> {
  const load = startLoad('bulk', target.upload, STREAMS_PER_PROCESS, seconds + WARMUP_SECONDS + 0.5);
  return measureBytes(target, load, () => askBytes(origin));
}

function measureDownload(target: Target): Promise<Rate> {
  const load = startLoad('download', target.download, STREAMS_PER_PROCESS, seconds + WARMUP_SECONDS + 0.5);
  return measureBytes(target, load, async () => (await Promise.all(load.map(askBytes))).reduce((a, b) => a + b, 0));
}

async function measureConnections(target: Target): Promise<Rate & { failed: number }> {
  const load = startLoad('connections', target.connections, CONCURRENCY_PER_PROCESS, WARMUP_SECONDS, seconds);
  const results = load.map((child) => waitForMessage<{ completed: number; failed: number }>(child, 'result'));
  await sleep(WARMUP_SECONDS * 1000);
  const cpuBefore = cpuSeconds(target.pid);
  const started = performance.now();
  await sleep(seconds * 1000);
  const cpu = target.pid === undefined ? undefined : (cpuSeconds(target.pid) - cpuBefore) / ((performance.now() - started) / 1000);
  const settled = await Promise.all(results);
  await Promise.all(load.map(exited));
  return {
    perSecond: settled.reduce((sum, r) => sum + r.completed, 0) / seconds,
    failed: settled.reduce((sum, r) => sum + r.failed, 0),
    cpu,
  };
}

function medianRate(rates: Rate[]): Rate {
  const cpuFigures = rates.map((rate) => rate.cpu).filter((cpu): cpu is number => cpu !== undefined);
  return { perSecond: median(rates.map((rate) => rate.perSecond)), cpu: cpuFigures.length === 0 ? undefined : median(cpuFigures) };
}

function haproxyConfig(ports: { upload: number; download: number; connections: number }, origin: OriginPorts): string {
  return `global
  nbthread 1
  # Each proxied connection holds two descriptors; stay under the usual 20,000 open-file limit.
  maxconn 8000
  log stderr format raw local0 emerg

defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s

frontend upload
  bind ${HAPROXY_ADDRESS}:${ports.upload}
  default_backend sink

frontend download
  bind ${HAPROXY_ADDRESS}:${ports.download}
  default_backend source

frontend connections
  bind ${HAPROXY_ADDRESS}:${ports.connections}
  default_backend echo

backend sink
  balance leastconn
  server origin ${ORIGIN_ADDRESS}:${origin.sinkPort}

backend source
  balance leastconn
  server origin ${ORIGIN_ADDRESS}:${origin.sourcePort}

backend echo
  balance leastconn
  server origin ${ORIGIN_ADDRESS}:${origin.echoPort}
`;
}

const children: ChildProcess[] = [];
const workDir = mkdtempSync(join(tmpdir(), 'tps-bench-l4-'));
process.on('exit', () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  rmSync(workDir, { recursive: true, force: true });
});

const haproxyPath = ensureHaproxy();
const haproxyVersion = haproxyPath === undefined ? undefined : spawnSync(haproxyPath, ['-v'], { encoding: 'utf8' }).stdout.split('\n')[0];

const origin = fork(join(here, 'origin.ts'), [ORIGIN_ADDRESS]);
children.push(origin);
const originPorts = await waitForMessage<OriginPorts>(origin, 'ready');

const targets: Target[] = [
  {
    name: 'direct to origin',
    upload: { host: ORIGIN_ADDRESS, port: originPorts.sinkPort },
    download: { host: ORIGIN_ADDRESS, port: originPorts.sourcePort },
    connections: { host: ORIGIN_ADDRESS, port: originPorts.echoPort },
  },
];

if (haproxyPath !== undefined) {
  const ports = {
    upload: await freePort(HAPROXY_ADDRESS),
    download: await freePort(HAPROXY_ADDRESS),
    connections: await freePort(HAPROXY_ADDRESS),
  };
  const config = join(workDir, 'haproxy.cfg');
  writeFileSync(config, haproxyConfig(ports, originPorts));
  const haproxy = spawn(haproxyPath, ['-f', config, '-db'], { stdio: ['ignore', 'inherit', 'inherit'] });
  children.push(haproxy);
  await waitUntilListening(HAPROXY_ADDRESS, ports.connections, haproxy);
  targets.push({
    name: `HAProxy ${haproxyVersion?.match(/version (\S+)/)?.[1] ?? ''} (nbthread 1)`,
    upload: { host: HAPROXY_ADDRESS, port: ports.upload },
    download: { host: HAPROXY_ADDRESS, port: ports.download },
    connections: { host: HAPROXY_ADDRESS, port: ports.connections },
    pid: haproxy.pid,
  });
} else {
  log('HAProxy unavailable: its row is left out.');
}

/** Our proxy of this tree, or of `checkout` (`--baseline`), as a target. */
async function ourTarget(name: string, checkout?: string): Promise<Target> {
  const ports = { upload: await freePort(OURS_ADDRESS), download: await freePort(OURS_ADDRESS), connections: await freePort(OURS_ADDRESS) };
  const script = checkout === undefined ? join(here, 'our-proxy.ts') : join(checkout, 'bench/l4/our-proxy.ts');
  const settings = {
    address: OURS_ADDRESS,
    bulkPort: ports.upload,
    downloadPort: ports.download,
    connPort: ports.connections,
    origin: ORIGIN_ADDRESS,
    ...originPorts,
  };
  const execArgv = [...PRODUCT_V8_FLAGS, ...(checkout === undefined ? [] : baselineFlags)];
  const ours = fork(script, [JSON.stringify(settings)], {
    execArgv,
    env: productEnvironment(),
    ...(checkout !== undefined && { cwd: checkout }),
  });
  children.push(ours);
  await waitForMessage(ours, 'ready');
  return {
    name,
    upload: { host: OURS_ADDRESS, port: ports.upload },
    download: { host: OURS_ADDRESS, port: ports.download },
    connections: { host: OURS_ADDRESS, port: ports.connections },
    pid: ours.pid,
  };
}

const OURS = 'tps L4Proxy (1 Node thread)';
const BASELINE = 'tps L4Proxy, baseline';
targets.push(await ourTarget(OURS));
const oursMalloc = mallocOf(targets.at(-1)!.pid!);
if (baselineCheckout !== undefined) targets.push(await ourTarget(BASELINE, baselineCheckout));

const samples = new Map<Target, Measurement[]>(targets.map((target) => [target, []]));
for (let round = 1; round <= rounds; round++) {
  for (const target of targets) {
    log(`round ${round}/${rounds}: ${target.name}`);
    const upload = await measureUpload(target, origin);
    const download = await measureDownload(target);
    const connections = await measureConnections(target);
    samples.get(target)!.push({ upload, download, connections, failed: connections.failed });
    await sleep(200);
  }
}

const results = targets.map((target) => {
  const measured = samples.get(target)!;
  return {
    target,
    upload: medianRate(measured.map((m) => m.upload)),
    download: medianRate(measured.map((m) => m.download)),
    connections: medianRate(measured.map((m) => m.connections)),
    failed: measured.reduce((sum, m) => sum + m.failed, 0),
  };
});

const direct = results[0]!;
const haproxy = results.find((result) => result.target.name.startsWith('HAProxy'));
const ratio = (value: number, base: number | undefined) => (base === undefined || base === 0 ? '-' : `${(value / base).toFixed(2)}x`);
const mbps = (rate: Rate) => (rate.perSecond / 1e6).toFixed(0);
const percent = (rate: Rate) => (rate.cpu === undefined ? '-' : `${Math.round(rate.cpu * 100)}%`);
// CPU per unit of work compares the proxies' efficiency whoever got how much of the shared cores.
const perGigabyte = (rate: Rate) => (rate.cpu === undefined ? '-' : `${((rate.cpu / rate.perSecond) * 1e9).toFixed(2)} s`);
const perConnection = (rate: Rate) => (rate.cpu === undefined ? '-' : `${Math.round((rate.cpu / rate.perSecond) * 1e6)} us`);

function table(header: string[], rows: string[][]): void {
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    `| ${cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join(' | ')} |`;
  console.log(line(header));
  console.log(`|${widths.map((width, i) => (i === 0 ? '-'.repeat(width + 2) : `${'-'.repeat(width + 1)}:`)).join('|')}|`);
  for (const row of rows) console.log(line(row));
}

console.log(
  `\nLayer 4 bench (loopback; ${haproxyVersion ?? 'no HAProxy'}; Node ${process.version}; ${cpus().length} cores): ` +
    `median of ${rounds} interleaved rounds of ${seconds} s after ${WARMUP_SECONDS} s warm-up. ` +
    `${LOAD_PROCESSES} load processes; upload/download: ${STREAMS_PER_PROCESS} streams each, 256 KiB writes; ` +
    `connections: ${CONCURRENCY_PER_PROCESS} concurrent each, 5 bytes out, 5 bytes back, the origin closes. ` +
    `Ours: ${PRODUCT_V8_FLAGS.join(' ')}, ${oursMalloc}${baselineFlags.length > 0 ? `; baseline also ${baselineFlags.join(' ')}` : ''}.\n`,
);
table(
  ['target', 'upload MB/s', 'vs direct', 'vs HAProxy', 'download MB/s', 'vs direct', 'vs HAProxy', 'conn/s', 'vs direct', 'vs HAProxy'],
  results.map((r) => [
    r.target.name,
    mbps(r.upload),
    ratio(r.upload.perSecond, direct.upload.perSecond),
    ratio(r.upload.perSecond, haproxy?.upload.perSecond),
    mbps(r.download),
    ratio(r.download.perSecond, direct.download.perSecond),
    ratio(r.download.perSecond, haproxy?.download.perSecond),
    r.connections.perSecond.toFixed(0),
    ratio(r.connections.perSecond, direct.connections.perSecond),
    ratio(r.connections.perSecond, haproxy?.connections.perSecond),
  ]),
);
console.log('\nProxy process CPU (user + system, all threads; 100% = one core) and CPU per unit of work:\n');
table(
  ['proxy', 'upload CPU', 'per GB', 'download CPU', 'per GB', 'connections CPU', 'per connection'],
  results
    .filter((r) => r.target.pid !== undefined)
    .map((r) => [
      r.target.name,
      percent(r.upload),
      perGigabyte(r.upload),
      percent(r.download),
      perGigabyte(r.download),
      percent(r.connections),
      perConnection(r.connections),
    ]),
);
const baseline = results.find((result) => result.target.name === BASELINE);
if (baseline !== undefined) {
  const ours = results.find((result) => result.target.name === OURS)!;
  const cpuPer = (rate: Rate) => (rate.cpu ?? Number.NaN) / rate.perSecond;
  console.log(
    `\nThis tree against the baseline (${baselineCheckout}), same rounds: upload ${ratio(ours.upload.perSecond, baseline.upload.perSecond)}, ` +
      `download ${ratio(ours.download.perSecond, baseline.download.perSecond)}, conn/s ${ratio(ours.connections.perSecond, baseline.connections.perSecond)}; ` +
      `CPU per connection ${ratio(cpuPer(ours.connections), cpuPer(baseline.connections))} of the baseline's.`,
  );
}
const failed = results.reduce((sum, r) => sum + r.failed, 0);
if (failed > 0) console.log(`\n${failed} short connections closed without an answer (not counted).`);
// Stop the children and wait for them (no zombie HAProxy left behind), at most 2 s.
for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
await Promise.race([Promise.all(children.map(exited)), sleep(2000)]);
process.exit(0);
