/**
 * Our side of bench/waf, in its own process (so that its CPU time, every thread included, can be
 * read from /proc and the process pinned with taskset): one ModSecurity engine (worker pool) and
 * one WAF hook shared by one HttpProxy per paranoia level, as an edge worker runs them.
 *
 *   node bench/waf/tps-proxy.ts '{"workers":1,"origin":"127.0.0.70:8080","listen":[{"ip":"127.0.0.72","port":8081,"paranoiaLevel":1}]}'
 *
 * Prints "ready <ruleCount>" on stdout once every proxy listens; stops on SIGTERM.
 */
import { loadGeoLookup } from '../../src/edge/geo/geo-lookup.ts';
import { HttpProxy } from '../../src/edge/http/http-proxy.ts';
import { createModSecurityEngine } from '@tps/waf-modsecurity';
import { createCompiledEngine } from '@tps/waf';
import { createWafHook } from '../../src/edge/http/waf/waf-hook.ts';
import { splitAddress } from '../support/net.ts';
import { permissiveOriginGuard } from '../../test/support/origin-guard.ts';
import { AccessLog } from '../../src/edge/access-log/access-log.ts';

export interface TpsProxyArgs {
  /** WAF engine worker threads (the compiled engine: 0 = in the proxy's own thread). */
  workers: number;
  /** The WAF engine behind the proxy: ModSecurity (default) or ours, compiled to JavaScript. */
  engine?: 'modsecurity' | 'compiled';
  /** The origin, "ip:port". */
  origin: string;
  listen: { ip: string; port: number; paranoiaLevel: 1 | 2 | 3 | 4 }[];
  /** A file: every request written to it as an access-log line (TPS_ACCESS_LOG's writer); absent = no access log. */
  accessLog?: string;
}

const args = JSON.parse(process.argv[2] ?? '') as TpsProxyArgs;
const engine =
  args.engine === 'compiled'
    ? await createCompiledEngine({ workers: args.workers })
    : await createModSecurityEngine({ workers: args.workers });
const accessLog = args.accessLog === undefined ? undefined : new AccessLog({ destination: args.accessLog, sample: 1 });
const deps = {
  ...(accessLog && { accessLog: accessLog.http }),
  insight: { record() {}, updateRateLimitEpisode() {} },
  geo: loadGeoLookup({ withoutMmdb: true }),
  location: 'BEN',
  waf: createWafHook(engine),
  // The benchmark's origin runs on loopback, which the product's origin policy refuses by default.
  originGuard: permissiveOriginGuard(),
};
const [originHost, originPort] = splitAddress(args.origin);
const proxies = args.listen.map(
  (l, i) =>
    new HttpProxy(
      {
        id: `00000000-0000-4000-8000-0000000be0${String(10 + i)}`,
        tenantId: '00000000-0000-4000-8000-00000000be00',
        revision: 1,
        attributes: {
          frontend: { ipv4: l.ip, port: l.port },
          backend: { hosts: [{ address: originHost, port: originPort }], deliveryMethod: 'LEAST_CONNECTIONS' },
          waf: { mode: 'BLOCKING', paranoiaLevel: l.paranoiaLevel, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] },
          // wrk is one source opening all its connections at once; nginx has no caps either.
          connectionLimits: {
            maxConnectionsPerSource: 1_000_000,
            maxNewConnectionsPerSecondPerSource: 1_000_000,
            maxConnections: 1_000_000,
          },
        },
      },
      deps,
    ),
);
for (const proxy of proxies) await proxy.start();

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  void Promise.all(proxies.map((p) => p.stop()))
    .then(() => engine.close())
    .then(() => accessLog?.close())
    .finally(() => process.exit(0));
});
process.stdout.write(`ready ${args.workers}\n`);
