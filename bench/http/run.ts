/**
 * HTTP proxy benchmark, in one sitting (about 80 s with the defaults):
 *
 *   direct   wrk -> origin
 *   nginx    wrk -> nginx reverse proxy (1 worker, keep-alive upstream) -> origin
 *   tps      wrk -> our HttpProxy, WAF off, running in THIS Node process -> origin
 *
 * The origin is nginx itself (1 worker) answering a small fixed body from memory, so it costs little
 * and is the same for all three. Both proxies add the same forwarding headers (X-Forwarded-For,
 * -Proto, -Host, X-Request-Id) and neither writes an access log. Rounds are interleaved so that
 * background load (other work on the machine) hits every target alike; the median round counts.
 *
 * Installs nginx and wrk from Debian when absent (as root), with a policy-rc.d that keeps the
 * package from starting nginx on port 80. Only loopback addresses are used.
 *
 * The proxy runs on the product's runtime, as `tps` does (src/cli/runtime.ts): this process
 * restarts itself once with its V8 flags and allocator before anything else.
 *
 * BENCH_ACCESS_LOG=1 adds a fourth target, `tps+log`: the same proxy with the access log on (every
 * request a JSON line in a file, TPS_ACCESS_LOG's writer), measured in the same rounds, and prints
 * what the log costs (goal: under 10 % of req/s).
 *
 * BENCH_FLOOR=1 adds `floor`: the least an HTTP/1.1 proxy does on Node (floor-proxy.ts: bare handles,
 * llhttp, none of the product), and `floor+http`, the same with node:http as its front end, each in
 * a process of its own on the product's runtime: what a JavaScript data path costs at least, and
 * what node:http adds, against nginx in the same rounds.
 *
 * BENCH_BASELINE=<checkout> (with its node_modules) adds two targets, each our proxy in a process of
 * its own on the product's runtime (tps-proxy.ts): `tps@child` of this tree and `tps@baseline` of
 * the checkout, measured in the same rounds, and prints this tree against the baseline.
 *
 *   node bench/http/run.ts
 *   BENCH_BASELINE=/tmp/older-tree node bench/http/run.ts
 *   BENCH_SECONDS=6 BENCH_ROUNDS=3 BENCH_CONNECTIONS=64 node bench/http/run.ts
 *   BENCH_ACCESS_LOG=1 node bench/http/run.ts
 *   BENCH_FLOOR=1 BENCH_ROUNDS=5 node bench/http/run.ts
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadGeoLookup } from '../../src/edge/geo/geo-lookup.ts';
import { HttpProxy } from '../../src/edge/http/http-proxy.ts';
import type { HttpProxyDeps, ResolvedHttpProxy } from '../../src/edge/http/types.ts';
import { AccessLog } from '../../src/edge/access-log/access-log.ts';
import { PRODUCT_V8_FLAGS, restartOnProductRuntime } from '../../src/cli/runtime.ts';
import { mallocOf, productEnvironment } from '../support/allocator.ts';
import { startReadyChild } from '../support/child.ts';
import { permissiveOriginGuard } from '../../test/support/origin-guard.ts';
import { processCpuSeconds } from '../support/cpu.ts';
import { hasCommand, installDebianPackages } from '../support/debian.ts';
import { freePort, splitAddress } from '../support/net.ts';
import { originLocation, proxyLocation, startNginx, writeNginxConf, type NginxProcess } from '../support/nginx.ts';
import { fixed, median, printTable, ratio } from '../support/table.ts';
import { runWrk, type WrkResult } from '../support/wrk.ts';
import type { HttpTpsProxyArgs } from './tps-proxy.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 6);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const ACCESS_LOG = process.env.BENCH_ACCESS_LOG === '1';
const FLOOR = process.env.BENCH_FLOOR === '1';
const BASELINE = process.env.BENCH_BASELINE ? path.resolve(process.env.BENCH_BASELINE) : undefined;
const WARMUP_SECONDS = 2;
const ORIGIN_IP = '127.0.0.60';
const NGINX_IP = '127.0.0.61';
const TPS_IP = '127.0.0.62';
const BODY = 'hello from the benchmark origin, a small static response\n';

const wrk = (url: string, seconds: number): Promise<WrkResult> => runWrk({ url, seconds, connections: CONNECTIONS });

/** Our proxy in a process of its own (tps-proxy.ts, or `file`), of this tree or of `root`; resolves once it listens. */
function startChildProxy(args: HttpTpsProxyArgs & { front?: string }, file = './tps-proxy.ts'): Promise<ChildProcess> {
  const script = new URL(file, import.meta.url).pathname;
  return startReadyChild(
    'a child proxy',
    process.execPath,
    [...PRODUCT_V8_FLAGS, script, JSON.stringify(args)],
    { env: productEnvironment() },
    30_000,
  );
}

async function main(): Promise<void> {
  const started = performance.now();
  installDebianPackages(['nginx', 'wrk'].filter((c) => !hasCommand(c)));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-bench-http-'));
  fs.chmodSync(dir, 0o755);
  const originAddress = `${ORIGIN_IP}:${await freePort(ORIGIN_IP)}`;
  const nginxAddress = `${NGINX_IP}:${await freePort(NGINX_IP)}`;
  const tpsPort = await freePort(TPS_IP);
  const loggingPort = await freePort(TPS_IP);
  const children: NginxProcess[] = [];
  let proxy: HttpProxy | undefined;
  let loggingProxy: HttpProxy | undefined;
  let accessLog: AccessLog | undefined;
  const childProxies: ChildProcess[] = [];
  try {
    const originConf = writeNginxConf({ dir, name: 'origin', servers: [{ listen: originAddress, location: originLocation(BODY) }] });
    children.push(await startNginx(originConf, dir, [originAddress]));
    const proxyConf = writeNginxConf({
      dir,
      name: 'proxy',
      upstreams: [{ name: 'origin', server: originAddress, keepalive: 64 }],
      servers: [{ listen: nginxAddress, location: proxyLocation('origin') }],
    });
    const nginxProxy = await startNginx(proxyConf, dir, [nginxAddress]);
    children.push(nginxProxy);
    const nginxWorker = nginxProxy.workerPids()[0]!;
    const [originHost, originPort] = splitAddress(originAddress);
    const config = (port: number): ResolvedHttpProxy => ({
      id: '00000000-0000-4000-8000-00000000be01',
      tenantId: '00000000-0000-4000-8000-00000000be00',
      revision: 1,
      attributes: {
        frontend: { ipv4: TPS_IP, port },
        backend: { hosts: [{ address: originHost, port: originPort }], deliveryMethod: 'LEAST_CONNECTIONS' },
        waf: { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] },
        // wrk is one source opening all its connections at once; nginx has no caps either.
        connectionLimits: { maxConnectionsPerSource: 1_000_000, maxNewConnectionsPerSecondPerSource: 1_000_000, maxConnections: 1_000_000 },
      },
    });
    const deps: HttpProxyDeps = {
      insight: { record() {}, updateRateLimitEpisode() {} },
      geo: loadGeoLookup({ withoutMmdb: true }),
      location: 'BEN',
      // The benchmark's origin runs on loopback, which the product's origin policy refuses by default.
      originGuard: permissiveOriginGuard(),
    };
    proxy = new HttpProxy(config(tpsPort), deps);
    await proxy.start();
    if (ACCESS_LOG) {
      accessLog = new AccessLog({ destination: path.join(dir, 'access.log'), sample: 1 });
      loggingProxy = new HttpProxy(config(loggingPort), { ...deps, accessLog: accessLog.http });
      await loggingProxy.start();
    }

    const childTargets: { name: string; url: string; cpu: () => number }[] = [];
    if (BASELINE !== undefined) {
      for (const [name, root] of [
        ['tps@child', undefined],
        ['tps@baseline', BASELINE],
      ] as const) {
        const port = await freePort(TPS_IP);
        const child = await startChildProxy({ ...(root && { root }), origin: originAddress, listen: { ip: TPS_IP, port } });
        childProxies.push(child);
        childTargets.push({ name, url: `http://${TPS_IP}:${port}/`, cpu: () => processCpuSeconds(child.pid!) });
      }
    }

    for (const [name, front] of FLOOR
      ? ([
          ['floor', 'handles'],
          ['floor+http', 'node:http'],
        ] as const)
      : []) {
      const port = await freePort(TPS_IP);
      const child = await startChildProxy({ origin: originAddress, listen: { ip: TPS_IP, port }, front }, './floor-proxy.ts');
      childProxies.push(child);
      childTargets.push({ name, url: `http://${TPS_IP}:${port}/`, cpu: () => processCpuSeconds(child.pid!) });
    }

    const targets = [
      { name: 'direct', url: `http://${originAddress}/`, cpu: undefined as undefined | (() => number) },
      { name: 'nginx', url: `http://${nginxAddress}/`, cpu: () => processCpuSeconds(nginxWorker) },
      {
        name: 'tps',
        url: `http://${TPS_IP}:${tpsPort}/`,
        cpu: () => {
          const u = process.cpuUsage();
          return (u.user + u.system) / 1e6;
        },
      },
      ...(ACCESS_LOG
        ? [
            {
              name: 'tps+log',
              url: `http://${TPS_IP}:${loggingPort}/`,
              cpu: () => {
                const u = process.cpuUsage();
                return (u.user + u.system) / 1e6;
              },
            },
          ]
        : []),
      ...childTargets,
    ];
    const results = new Map<string, (WrkResult & { cpuUsPerRequest: number })[]>();
    for (const target of targets) {
      await wrk(target.url, WARMUP_SECONDS);
      results.set(target.name, []);
    }
    for (let round = 1; round <= ROUNDS; round++) {
      // The order alternates from round to round, so that no target always follows the same one:
      // tps and tps+log share this process, and the one measured second read slower even when its
      // access log wrote nothing.
      for (const target of round % 2 === 1 ? targets : [...targets].reverse()) {
        const cpuBefore = target.cpu?.() ?? 0;
        const r = await wrk(target.url, SECONDS);
        const cpu = target.cpu ? target.cpu() - cpuBefore : NaN;
        const cpuUsPerRequest = (cpu * 1e6) / r.requests;
        results.get(target.name)!.push({ ...r, cpuUsPerRequest });
        console.log(
          `round ${round} ${target.name.padEnd(7)} ${r.rps.toFixed(0).padStart(7)} req/s  p50 ${r.p50Ms.toFixed(2)} ms  p99 ${r.p99Ms.toFixed(2)} ms` +
            (Number.isFinite(cpuUsPerRequest) ? `  ${cpuUsPerRequest.toFixed(1)} us CPU/req` : '') +
            (r.errors ? `  (${r.errors})` : ''),
        );
      }
    }

    const summary = targets.map((t) => {
      const rs = results.get(t.name)!;
      return {
        name: t.name,
        rps: median(rs.map((r) => r.rps)),
        p99: median(rs.map((r) => r.p99Ms)),
        cpu: median(rs.map((r) => r.cpuUsPerRequest)),
      };
    });
    const nginx = summary.find((s) => s.name === 'nginx')!;
    const direct = summary.find((s) => s.name === 'direct')!;
    console.log(
      `\nwrk -t1 -c${CONNECTIONS}, ${ROUNDS} rounds of ${SECONDS} s, median; ${os.cpus().length} cores, Node ${process.version}, ` +
        `${mallocOf('self')}, ${PRODUCT_V8_FLAGS.filter((flag) => process.execArgv.includes(flag)).join(' ') || 'no product V8 flags'}`,
    );
    printTable(
      ['target', 'req/s', 'p99 ms', 'CPU us/req', 'vs nginx req/s', 'vs nginx CPU', 'vs direct req/s'],
      summary.map((s) => [
        s.name,
        s.rps.toFixed(0),
        s.p99.toFixed(2),
        fixed(s.cpu, 1),
        ratio(s.rps, nginx.rps),
        Number.isFinite(s.cpu) ? ratio(nginx.cpu, s.cpu) : '-',
        ratio(s.rps, direct.rps),
      ]),
    );
    const tps = summary.find((s) => s.name === 'tps')!;
    // The goal (docs/benchmarks.md): three quarters of nginx's rate and of its efficiency, a tail at most twice its.
    const met = (ok: boolean): string => (ok ? 'MET' : 'NOT MET');
    console.log(
      `\ngoal: tps >= 0.75x nginx req/s -> ${(tps.rps / nginx.rps).toFixed(2)}x ${met(tps.rps >= 0.75 * nginx.rps)}; ` +
        `CPU per request >= 0.75x nginx's efficiency -> ${(nginx.cpu / tps.cpu).toFixed(2)}x ${met(nginx.cpu >= 0.75 * tps.cpu)}; ` +
        `p99 <= 2x nginx's -> ${(tps.p99 / nginx.p99).toFixed(2)}x ${met(tps.p99 <= 2 * nginx.p99)}`,
    );
    const logged = summary.find((s) => s.name === 'tps+log');
    if (logged !== undefined && accessLog !== undefined) {
      await accessLog.flush();
      const { written, dropped } = accessLog.counts;
      const ratioLogged = logged.rps / tps.rps;
      console.log(
        `access log: tps+log / tps req/s ${ratioLogged.toFixed(3)} (goal >= 0.90: ${ratioLogged >= 0.9 ? 'MET' : 'NOT MET'}), ` +
          `CPU ${fixed(logged.cpu, 1)} vs ${fixed(tps.cpu, 1)} us/req; ${written} lines written, ${dropped} dropped`,
      );
    }
    const floor = summary.find((s) => s.name === 'floor');
    const floorHttp = summary.find((s) => s.name === 'floor+http');
    if (floor !== undefined && floorHttp !== undefined) {
      console.log(
        `floor (the least a Node proxy does, floor-proxy.ts): ${fixed(floor.cpu, 1)} us CPU/req, ${(nginx.cpu / floor.cpu).toFixed(2)}x nginx's ` +
          `efficiency, ${(floor.rps / nginx.rps).toFixed(2)}x its req/s; node:http as its front end adds ${fixed(floorHttp.cpu - floor.cpu, 1)} us, ` +
          `the product over that ${fixed(tps.cpu - floorHttp.cpu, 1)} us`,
      );
    }
    const child = summary.find((s) => s.name === 'tps@child');
    const baseline = summary.find((s) => s.name === 'tps@baseline');
    if (child !== undefined && baseline !== undefined) {
      console.log(
        `this tree against ${BASELINE} (each in its own process, same rounds): req/s ${(child.rps / baseline.rps).toFixed(3)}x, ` +
          `CPU per request ${fixed(child.cpu, 1)} vs ${fixed(baseline.cpu, 1)} us (${(baseline.cpu / child.cpu).toFixed(3)}x)`,
      );
    }
    console.log(`total ${((performance.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    await proxy?.stop();
    await loggingProxy?.stop();
    await accessLog?.close();
    for (const child of childProxies) child.kill('SIGTERM');
    await Promise.all(children.map((child) => child.stop()));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

restartOnProductRuntime();
await main();
