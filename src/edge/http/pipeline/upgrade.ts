/**
 * Phase 6 for upgrade requests (WebSocket, or any HTTP/1.1 `Connection: upgrade`): after the request
 * phases let it through, the proxy opens its own connection to an origin, writes the request head
 * (with the forwarded headers) and then pipes raw bytes both ways: the origin's 101 (or refusal)
 * and every frame after it pass through untouched. No keep-alive pool: the connection belongs to
 * this client until either side closes it or it stays idle for `upgradeIdleTimeoutMs`.
 *
 * A host that cannot be connected (or that the origin policy refuses) is marked down and the next
 * one tried, as for other requests.
 */
import net from 'node:net';
import type { PooledHost } from '../../balance/index.ts';
import type { RequestCtx } from '../ctx.ts';
import { originRequestHeaders } from '../headers.ts';
import { finishRequest } from './events.ts';
import { pageAnswer, respond } from './respond.ts';

export function tunnelToOrigin(ctx: RequestCtx): void {
  new UpgradeTunnel(ctx).attempt();
}

class UpgradeTunnel {
  private readonly ctx: RequestCtx;
  private readonly tried = new Set<number>();
  private lastError: string | undefined = undefined;

  constructor(ctx: RequestCtx) {
    this.ctx = ctx;
  }

  attempt(): void {
    const ctx = this.ctx;
    const client = ctx.upgradeSocket!;
    if (client.destroyed) return finishRequest(ctx);
    const origins = ctx.proxy.origins;
    const host = origins.hostPool.pick(ctx.clientIp, this.tried);
    if (host === undefined) {
      const timeout = this.lastError === 'ETIMEDOUT';
      return respond(ctx, pageAnswer(ctx, 'upstream', timeout ? 'gateway-timeout' : 'bad-gateway'));
    }
    ctx.upstreamHost = host;
    ctx.upstreamAttempts++;
    const origin = this.connect(host);
    let connected = false;
    const onConnectTimeout = (): void => {
      origin.destroy(Object.assign(new Error('connect timeout'), { code: 'ETIMEDOUT' }));
    };
    origin.setTimeout(origins.connectTimeoutMs);
    origin.once('timeout', onConnectTimeout);
    origin.once(origins.tls !== undefined ? 'secureConnect' : 'connect', () => {
      connected = true;
      origin.off('timeout', onConnectTimeout);
      this.pipe(host, origin);
    });
    origin.on('error', (err: NodeJS.ErrnoException) => {
      if (connected) return;
      this.lastError = err.code ?? err.name;
      ctx.upstreamError = this.lastError;
      ctx.proxy.deps.metrics?.upstreamFailed?.(ctx.proxy.id, `${host.address}:${host.port}`, this.lastError);
      origins.hostPool.markDown(host);
      this.tried.add(host.index);
      this.attempt();
    });
  }

  private connect(host: PooledHost): net.Socket {
    const origins = this.ctx.proxy.origins;
    if (origins.tls === undefined) return origins.guard.connect({ host: host.address, port: host.port, noDelay: true });
    const name = hostName(this.ctx.host);
    return origins.guard.connectTls({
      ...origins.tls,
      host: host.address,
      port: host.port,
      ...(name !== '' && net.isIP(name) === 0 ? { servername: name } : {}),
      ALPNProtocols: ['http/1.1'],
    });
  }

  private pipe(host: PooledHost, origin: net.Socket): void {
    const ctx = this.ctx;
    const client = ctx.upgradeSocket!;
    const pool = ctx.proxy.origins.hostPool;
    if (host.downUntil !== 0) pool.markUp(host);
    pool.begin(host);
    let closed = false;
    const close = (): void => {
      if (closed) return;
      closed = true;
      pool.end(host);
      client.destroy();
      origin.destroy();
      finishRequest(ctx);
    };
    const idle = ctx.proxy.limits.upgradeIdleTimeoutMs;
    origin.setTimeout(idle, close);
    if (client instanceof net.Socket) client.setTimeout(idle, close);
    origin.on('error', close).on('close', close);
    client.on('error', close).on('close', close);

    const req = ctx.req;
    let head = `${req.method} ${req.url} HTTP/1.1\r\n`;
    const headers = originRequestHeaders(ctx, true);
    for (let i = 0; i + 1 < headers.length; i += 2) head += `${headers[i]}: ${headers[i + 1]}\r\n`;
    origin.write(head + '\r\n', 'latin1');
    if (ctx.upgradeHead !== undefined && ctx.upgradeHead.length > 0) origin.write(ctx.upgradeHead);
    origin.once('data', (chunk: Buffer) => {
      // Only for the log: the status of the origin's answer (101 when the upgrade was accepted).
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(chunk.subarray(0, 16).toString('latin1'));
      ctx.answeredBy = 'upstream';
      ctx.statusCode = match ? Number(match[1]) : 0;
    });
    origin.pipe(client);
    client.pipe(origin);
  }
}

function hostName(host: string): string {
  if (host.startsWith('[')) return host.slice(1, Math.max(1, host.indexOf(']')));
  const colon = host.lastIndexOf(':');
  return colon === -1 ? host : host.slice(0, colon);
}
