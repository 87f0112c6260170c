/**
 * The origin side of one proxy: its hosts (a `HostPool` that applies the delivery method and passive
 * health) and one undici keep-alive connection pool per host, plus the TLS options to reach them.
 *
 * Kept across configuration updates when the backend did not change (the pools and their warm
 * connections stay); a changed backend gets a new set whose HostPool carries over the open-request
 * counts and down marks of hosts that remain, and the old pools are closed once their requests end.
 */
import net from 'node:net';
import type { ConnectionOptions } from 'node:tls';
import { Pool, type buildConnector } from 'undici';
import { HostPool, type PooledHost } from '../../balance/index.ts';
import { OriginClient } from './origin-client.ts';
import type { ResolvedHttpProxy } from '../types.ts';
import type { HttpLimits } from '../limits.ts';
import { originTlsOptions } from '../tls.ts';
import type { OriginGuard, ScopedOriginGuard } from '../../../net/origin-guard.ts';

/** Errors raised while opening a connection (origin policy, TCP connect, TLS handshake, certificate check, connect timeout). */
const connectFailures = new WeakSet<Error>();

/**
 * True when `err` happened before any byte of the request reached the origin: the host is unreachable
 * (or untrusted), and the request can be retried elsewhere whatever its method.
 */
export function isConnectFailure(err: Error): boolean {
  return connectFailures.has(err);
}

export function originSetKey(config: ResolvedHttpProxy): string {
  const backend = config.attributes.backend;
  return JSON.stringify([
    backend.hosts,
    backend.deliveryMethod ?? 'LEAST_CONNECTIONS',
    backend.tlsSettings ? 'tls' : 'plain',
    config.originTrust ?? null,
    config.originClientCertificate ?? null,
  ]);
}

export class OriginSet {
  readonly key: string;
  readonly hostPool: HostPool;
  /** undici pools by `PooledHost.index`: requests with a body. */
  readonly pools: readonly Pool[];
  /** Hand-written keep-alive clients by `PooledHost.index`: requests without a body (the hot path). */
  readonly originClients: readonly OriginClient[];
  /** TLS options towards the origins; undefined = plain HTTP. */
  readonly tls: ConnectionOptions | undefined;
  readonly connectTimeoutMs: number;
  /** Opens connections that do not go through a pool (upgrades): the origin policy checks each. */
  readonly guard: ScopedOriginGuard;

  /** `guard`: every connection to an origin goes through the origin policy (checked and pinned address). */
  constructor(config: ResolvedHttpProxy, limits: HttpLimits, guard: OriginGuard, previous: OriginSet | undefined, downForMs?: number) {
    this.key = originSetKey(config);
    const backend = config.attributes.backend;
    const method = backend.deliveryMethod ?? 'LEAST_CONNECTIONS';
    this.hostPool =
      previous !== undefined
        ? previous.hostPool.withHosts(backend.hosts, method)
        : new HostPool(backend.hosts, method, downForMs === undefined ? {} : { downForMs });
    this.tls = originTlsOptions(config);
    this.connectTimeoutMs = limits.upstreamConnectTimeoutMs;
    const scoped = guard.for(config.id);
    this.guard = scoped;
    const connectorOf = (host: PooledHost): buildConnector.connector => {
      const base = scoped.undiciConnector(host.address, host.port, { ...this.tls, timeout: limits.upstreamConnectTimeoutMs });
      return (options, callback) =>
        base(options, (...args) => {
          if (args[0] !== null) connectFailures.add(args[0]);
          callback(...args);
        });
    };
    this.pools = this.hostPool.hosts.map(
      (host) =>
        new Pool(originUrl(host, this.tls !== undefined), {
          connections: limits.upstreamConnectionsPerHost,
          pipelining: 1,
          keepAliveTimeout: limits.upstreamKeepAliveTimeoutMs,
          headersTimeout: limits.upstreamHeadersTimeoutMs,
          bodyTimeout: limits.upstreamBodyTimeoutMs,
          maxHeaderSize: 32 * 1024,
          connect: connectorOf(host),
        }),
    );
    this.originClients = this.hostPool.hosts.map(
      (host) =>
        new OriginClient({
          address: host.address,
          port: host.port,
          tls: this.tls,
          connectTimeoutMs: limits.upstreamConnectTimeoutMs,
          headersTimeoutMs: limits.upstreamHeadersTimeoutMs,
          bodyTimeoutMs: limits.upstreamBodyTimeoutMs,
          keepAliveTimeoutMs: limits.upstreamKeepAliveTimeoutMs,
          maxConnections: limits.upstreamConnectionsPerHost,
          maxHeaderSize: 32 * 1024,
          onConnectFailure: (err) => connectFailures.add(err),
          guard: scoped,
        }),
    );
  }

  /** Lets requests in flight finish for up to `graceMs`, then cuts what is left. */
  async close(graceMs: number): Promise<void> {
    await Promise.all([
      ...this.originClients.map((client) => client.close(graceMs)),
      ...this.pools.map(async (pool) => {
        const timer = setTimeout(() => void pool.destroy().catch(() => {}), graceMs);
        try {
          await pool.close();
        } catch {
          // Already destroyed by the timer.
        } finally {
          clearTimeout(timer);
        }
      }),
    ]);
  }
}

function originUrl(host: PooledHost, secure: boolean): string {
  const address = net.isIPv6(host.address) ? `[${host.address}]` : host.address;
  return `${secure ? 'https' : 'http'}://${address}:${host.port}`;
}
