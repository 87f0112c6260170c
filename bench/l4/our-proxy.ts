/**
 * Our L4 proxy for the bench, run as a child of run.ts: one Node process, one thread, three
 * L4Proxy instances (upload -> sink, download -> source, connections -> echo) as the edge runs them,
 * threat feed (the sample feed) and flood caps on (caps high enough for one load-generating source).
 *
 *   node bench/l4/our-proxy.ts '<json: { address, bulkPort, downloadPort, connPort, origin, sinkPort, sourcePort, echoPort }>'
 */
import { fileURLToPath } from 'node:url';
import { L4Proxy } from '../../src/edge/l4/l4-proxy.ts';
import { ThreatFeed } from '../../src/edge/l4/threat-feed.ts';
import { permissiveOriginGuard } from '../../test/support/origin-guard.ts';
import type { L4ProxyAttributes } from '@tps/model';

interface Settings {
  address: string;
  bulkPort: number;
  downloadPort: number;
  connPort: number;
  origin: string;
  sinkPort: number;
  sourcePort: number;
  echoPort: number;
}

const settings = JSON.parse(process.argv[2] ?? '{}') as Settings;
const feed = new ThreatFeed({
  sources: [fileURLToPath(new URL('../../src/edge/l4/sample-threat-feed.txt', import.meta.url))],
  refreshIntervalMs: 0,
});
await feed.start();

function attributes(port: number, originPort: number): L4ProxyAttributes {
  return {
    frontend: { ipv4: settings.address, port },
    backend: { hosts: [{ address: settings.origin, port: originPort }], deliveryMethod: 'LEAST_CONNECTIONS' },
    protocols: ['TCP'],
    proxyProtocol: { enabled: false, version: 1 },
    threatIntelligence: { enabled: true },
    connectionLimits: { maxConnectionsPerSource: 1_000_000, maxNewConnectionsPerSecondPerSource: 1_000_000, maxConnections: 1_000_000 },
  };
}

// The benchmark's origins run on loopback, which the product's origin policy refuses by default.
const originGuard = permissiveOriginGuard();
const proxies = [
  new L4Proxy({ id: 'bench-upload', attributes: attributes(settings.bulkPort, settings.sinkPort), threatFeed: feed, originGuard }),
  new L4Proxy({ id: 'bench-download', attributes: attributes(settings.downloadPort, settings.sourcePort), threatFeed: feed, originGuard }),
  new L4Proxy({ id: 'bench-connections', attributes: attributes(settings.connPort, settings.echoPort), threatFeed: feed, originGuard }),
];
await Promise.all(proxies.map((proxy) => proxy.start()));
process.on('message', async (message: { type: string }) => {
  if (message.type === 'exit') {
    await Promise.all(proxies.map((proxy) => proxy.stop()));
    process.exit(0);
  }
});
process.send?.({ type: 'ready' });
