/**
 * The operators' listener (TPS_METRICS_LISTEN): Prometheus `/metrics` and `/healthz`, on every node
 * (`tps serve` and `tps edge`), never on the public API listener. Tenants reach the API; what the
 * counters say about every tenant's proxies is for the people who run the service.
 *
 * A plain node:http server: two fixed routes need no framework, and it keeps answering while the
 * API is busy.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Metrics } from './metrics.ts';
import { CONNECTIONS_CHECKING_INTERVAL_MS, guardListener } from './listener-guard.ts';

export interface HealthReport {
  /** false: the node cannot do its job (store unreachable); answered 503. */
  ok: boolean;
  /** Shown as is in the JSON body. */
  [detail: string]: unknown;
}

export interface MetricsListener {
  /** http://host:port of the listener. */
  readonly url: string;
  /** The address and port bound (the port given, or the one the system chose for 0). */
  readonly address: { host: string; port: number };
  close(): Promise<void>;
}

/**
 * Slow or idle scrapers must not hold sockets: a head within 10 s, a request within 30 s, 5 s idle
 * between requests (and 60 s of silence mid-exchange, below: past the request timeout, which answers 408 first). Scrapers send no body.
 */
const LISTENER_OPTIONS: http.ServerOptions = {
  headersTimeout: 10_000,
  requestTimeout: 30_000,
  keepAliveTimeout: 5_000,
  connectionsCheckingInterval: CONNECTIONS_CHECKING_INTERVAL_MS,
};

export async function startMetricsListener(options: {
  listen: { host: string; port: number };
  metrics: Metrics;
  health: () => Promise<HealthReport>;
  /** Connections open at once (TPS_METRICS_MAX_CONNECTIONS); past it new ones are closed at accept. */
  maxConnections: number;
}): Promise<MetricsListener> {
  const { metrics, health } = options;
  const server = http.createServer(LISTENER_OPTIONS, (request, response) => {
    const path = (request.url ?? '/').split('?')[0];
    if (request.method !== 'GET' && request.method !== 'HEAD') {
      response.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    const answer = async (): Promise<void> => {
      if (path === '/metrics') {
        const text = await metrics.registry.metrics();
        response.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text);
      } else if (path === '/healthz') {
        let report: HealthReport;
        try {
          report = await health();
        } catch (error) {
          report = { ok: false, error: error instanceof Error ? error.message : String(error) };
        }
        const { ok, ...details } = report;
        response
          .writeHead(ok ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' })
          .end(JSON.stringify({ status: ok ? 'ok' : 'failing', ...details }));
      } else {
        response.writeHead(404, { 'content-type': 'text/plain' }).end('not found: /metrics and /healthz live here\n');
      }
    };
    answer().catch(() => {
      if (!response.headersSent) response.writeHead(500, { 'content-type': 'text/plain' });
      response.end('internal error\n');
    });
  });
  server.setTimeout(60_000);
  // No cap per source: scrapers and health checks come from a few addresses of the operators.
  guardListener(server, { listener: 'metrics', maxConnections: options.maxConnections, ipv6Prefix: 64, answerClientErrors: true }, metrics);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: options.listen.host, port: options.listen.port }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    address: { host: address.address, port: address.port },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
