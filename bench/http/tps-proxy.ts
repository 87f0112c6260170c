/**
 * Our side of bench/http in a process of its own, for comparing two trees in the same rounds
 * (BENCH_BASELINE): one HttpProxy with every feature off, as run.ts runs its in-process one, from
 * the modules of `root` (this tree when absent). The modules are imported from `root`, so that an
 * older checkout needs none of this file: only its HttpProxy's constructor and start/stop.
 *
 *   node bench/http/tps-proxy.ts '{"root":"/path/to/checkout","origin":"127.0.0.60:8080","listen":{"ip":"127.0.0.63","port":8081}}'
 *
 * Prints "ready" on stdout once it listens; stops on SIGTERM.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { splitAddress } from '../support/net.ts';

export interface HttpTpsProxyArgs {
  /** The checkout whose proxy runs; default this tree. */
  root?: string;
  /** The origin, "ip:port". */
  origin: string;
  listen: { ip: string; port: number };
}

interface ProxyModule {
  HttpProxy: new (config: unknown, deps: unknown) => { start(): Promise<void>; stop(): Promise<void> };
}

const args = JSON.parse(process.argv[2] ?? '') as HttpTpsProxyArgs;
const root = args.root ?? path.resolve(import.meta.dirname, '../..');
const from = <T>(file: string): Promise<T> => import(pathToFileURL(path.join(root, file)).href) as Promise<T>;
const { HttpProxy } = await from<ProxyModule>('src/edge/http/http-proxy.ts');
const { loadGeoLookup } = await from<{ loadGeoLookup: (options: { withoutMmdb: boolean }) => unknown }>('src/edge/geo/geo-lookup.ts');
const { permissiveOriginGuard } = await from<{ permissiveOriginGuard: () => unknown }>('test/support/origin-guard.ts');
const [originHost, originPort] = splitAddress(args.origin);
const proxy = new HttpProxy(
  {
    id: '00000000-0000-4000-8000-00000000be02',
    tenantId: '00000000-0000-4000-8000-00000000be00',
    revision: 1,
    attributes: {
      frontend: { ipv4: args.listen.ip, port: args.listen.port },
      backend: { hosts: [{ address: originHost, port: originPort }], deliveryMethod: 'LEAST_CONNECTIONS' },
      waf: { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] },
      connectionLimits: { maxConnectionsPerSource: 1_000_000, maxNewConnectionsPerSecondPerSource: 1_000_000, maxConnections: 1_000_000 },
    },
  },
  {
    insight: { record() {}, updateRateLimitEpisode() {} },
    geo: loadGeoLookup({ withoutMmdb: true }),
    location: 'BEN',
    originGuard: permissiveOriginGuard(),
  },
);
await proxy.start();
process.on('SIGTERM', () => {
  void proxy.stop().finally(() => process.exit(0));
});
process.stdout.write('ready\n');
