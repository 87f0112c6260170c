/**
 * Our HTTP proxy for bench/flood, run as a child of run.ts (so that taskset can pin it alone): one
 * Node process, one thread, one HttpProxy with a rate limit every flooding source crosses at once
 * (1 request per 60 s, blocked for an hour), as the edge's worker runs it. Reports how many
 * requests reached the origin and the refusals it counted when asked.
 *
 *   node bench/flood/tps-proxy.ts '<json: { address, port, origin, originPort }>'
 */
import { loadGeoLookup } from '../../src/edge/geo/geo-lookup.ts';
import { HttpProxy } from '../../src/edge/http/http-proxy.ts';
import type { HttpProxyDeps, ResolvedHttpProxy } from '../../src/edge/http/types.ts';
import { permissiveOriginGuard } from '../../test/support/origin-guard.ts';

interface Settings {
  address: string;
  port: number;
  origin: string;
  originPort: number;
}

const settings = JSON.parse(process.argv[2] ?? '{}') as Settings;
let episodes = 0;
let completed = 0;
const config: ResolvedHttpProxy = {
  id: '00000000-0000-4000-8000-00000000f100',
  tenantId: '00000000-0000-4000-8000-00000000f1aa',
  revision: 1,
  attributes: {
    frontend: { ipv4: settings.address, port: settings.port },
    backend: { hosts: [{ address: settings.origin, port: settings.originPort }], deliveryMethod: 'LEAST_CONNECTIONS' },
    waf: { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] },
    rateLimiting: { thresholds: [{ requests: 1, periodSeconds: 60 }], blockSeconds: 3600 },
    // wrk is one source opening all its connections at once; nginx has no connection caps either.
    connectionLimits: { maxConnectionsPerSource: 1_000_000, maxNewConnectionsPerSecondPerSource: 1_000_000, maxConnections: 1_000_000 },
  },
};
const deps: HttpProxyDeps = {
  insight: {
    record() {
      episodes++;
    },
    updateRateLimitEpisode() {},
  },
  geo: loadGeoLookup({ withoutMmdb: true }),
  location: 'BEN',
  // The benchmark's origin runs on loopback, which the product's origin policy refuses by default.
  originGuard: permissiveOriginGuard(),
  metrics: {
    requestCompleted: () => {
      completed++;
    },
  },
};
if (process.env.TPS_EARLY_REFUSAL_ENGINE === 'javascript') {
  // As an edge worker does with the setting (a baseline checkout without the engine ignores it).
  const { configureRefusalEngine } = await import('../../src/edge/http/refusal-engine.ts');
  configureRefusalEngine('javascript');
}
const proxy = new HttpProxy(config, deps);
await proxy.start();
process.on('message', async (message: { type: string }) => {
  if (message.type === 'stats') process.send?.({ type: 'stats', episodes, completed });
  if (message.type === 'exit') {
    await proxy.stop();
    process.exit(0);
  }
});
process.send?.({ type: 'ready' });
