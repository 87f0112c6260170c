/**
 * The upstream exchange of WebSocket upgrade requests (`isWebSocketUpgrade`: the only upgrade the proxy takes;
 * any other `Upgrade` is a plain request, see http-proxy.ts). After the request phases let it
 * through, the proxy opens its own connection to an origin and sends the handshake (with the
 * forwarded headers). The connection becomes a byte pipe only once the origin answers 101 with
 * `Upgrade: websocket`: until then nothing more of the client's bytes goes to the origin. Any other
 * answer is relayed to the client as it is, and both connections are closed: a request the client
 * sent after a refused upgrade is never read, so nothing reaches the origin past the phases.
 * No keep-alive pool: the connection belongs to this client until either side closes it or it stays
 * idle for `upgradeIdleTimeoutMs`.
 *
 * A host that cannot be connected (or that the origin policy refuses) is marked down and the next
 * one tried, as for other requests (retry-decision.ts: fail_to_connect); with none left, the
 * last failure picks the page (`failurePage`).
 */
import http from 'node:http';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import type { PooledHost } from '../../balance/index.ts';
import type { ClientRequest as ProxiedRequest, RequestCtx } from '../ctx.ts';
import { originRequestHeaders } from '../headers.ts';
import { loggingPhase } from '../phases/logging.ts';
import { pageAnswer, respond } from '../phases/respond.ts';
import { failurePage } from './retry-decision.ts';

/** Headers of the origin's refusal not relayed: its framing is ours (the connection closes after the body). */
const NOT_RELAYED = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer']);

/**
 * A WebSocket handshake (RFC 6455 4.1): an HTTP/1.1 GET whose Upgrade header is the one token
 * `websocket` (any case). Node hands only these to the proxy's 'upgrade' listener.
 */
export function isWebSocketUpgrade(req: ProxiedRequest | http.IncomingMessage): boolean {
  if (req.method !== 'GET' || req.httpVersion !== '1.1') return false;
  const upgrade = req.headers.upgrade;
  return typeof upgrade === 'string' && upgrade.trim().toLowerCase() === 'websocket';
}

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
    if (client.destroyed) return loggingPhase.run(ctx);
    const origins = ctx.proxy.origins;
    const host = origins.hostPool.pick(ctx.clientIp, this.tried);
    if (host === undefined) return respond(ctx, pageAnswer(ctx, 'upstream', failurePage(this.lastError)));
    ctx.upstreamHost = host;
    ctx.upstreamAttempts++;
    if (ctx.upstreamStartedAt < 0) ctx.upstreamStartedAt = performance.now();
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
      this.handshake(host, origin);
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

  /** Sends the handshake; pipes only after the origin's 101, else relays its answer and closes. */
  private handshake(host: PooledHost, origin: net.Socket): void {
    const ctx = this.ctx;
    const client = ctx.upgradeSocket!;
    const pool = ctx.proxy.origins.hostPool;
    const limits = ctx.proxy.limits;
    if (host.downUntil !== 0) pool.markUp(host);
    pool.begin(host);
    let closed = false;
    let answered = false;
    const close = (): void => {
      if (closed) return;
      closed = true;
      pool.end(host);
      client.destroy();
      origin.destroy();
      loggingPhase.run(ctx);
    };
    const failed = (kind: 'bad-gateway' | 'gateway-timeout', code: string): void => {
      if (closed) return;
      if (answered) return close();
      closed = true;
      ctx.upstreamError = code;
      ctx.proxy.deps.metrics?.upstreamFailed?.(ctx.proxy.id, `${host.address}:${host.port}`, code);
      pool.end(host);
      origin.destroy();
      respond(ctx, pageAnswer(ctx, 'upstream', kind));
    };
    client.on('error', close).on('close', close);
    if (client instanceof net.Socket) client.setTimeout(limits.upgradeIdleTimeoutMs, close);
    // Until the origin's answer head: its headers timeout; then the idle timeout.
    const headersTimeout = (): void => failed('gateway-timeout', 'ETIMEDOUT');
    origin.setTimeout(limits.upstreamHeadersTimeoutMs, headersTimeout);

    const request = http.request({
      createConnection: () => origin,
      method: 'GET',
      path: ctx.target,
      setHost: false,
      headers: originRequestHeaders(ctx, true),
    });
    request.on('error', (err: NodeJS.ErrnoException) => failed('bad-gateway', err.code ?? err.name));
    request.on('upgrade', (res: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      if (closed) return;
      if (res.statusCode !== 101 || (res.headers.upgrade ?? '').trim().toLowerCase() !== 'websocket') {
        // An origin that switches to anything but the WebSocket it was asked for gets no pipe.
        return failed('bad-gateway', 'BAD_UPGRADE');
      }
      answered = true;
      ctx.answeredBy = 'upstream';
      ctx.originAnswered = true;
      ctx.upstreamAnsweredAt = performance.now();
      ctx.statusCode = 101;
      client.write(responseHead(res, res.rawHeaders));
      if (head.length > 0) client.write(head);
      origin.off('timeout', headersTimeout);
      origin.setTimeout(limits.upgradeIdleTimeoutMs, close);
      socket.on('error', close).on('close', close);
      if (ctx.upgradeHead !== undefined && ctx.upgradeHead.length > 0) socket.write(ctx.upgradeHead);
      // A WebSocket ends with its closing frames; a side that ends its half of the connection ends
      // the tunnel once the other side has taken what was in flight (no half-open tunnels).
      socket.once('end', () => client.end(close));
      client.once('end', () => socket.end(close));
      socket.pipe(client);
      client.pipe(socket);
    });
    request.on('response', (res: http.IncomingMessage) => {
      if (closed) return;
      // Refused (or anything but 101): relayed whole, then the connection ends. What the client
      // sent after its handshake is never read.
      answered = true;
      ctx.answeredBy = 'upstream';
      ctx.originAnswered = true;
      ctx.upstreamAnsweredAt = performance.now();
      ctx.statusCode = res.statusCode ?? 0;
      const relayed: string[] = [];
      for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
        if (!NOT_RELAYED.has(res.rawHeaders[i]!.toLowerCase())) relayed.push(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
      }
      relayed.push('Connection', 'close');
      client.write(responseHead(res, relayed));
      res.on('data', (chunk: Buffer) => {
        ctx.bytesOut += chunk.length;
        if (!client.write(chunk)) {
          res.pause();
          client.once('drain', () => res.resume());
        }
      });
      res.on('end', () => {
        if (closed) return;
        closed = true;
        pool.end(host);
        origin.destroy();
        client.end();
        loggingPhase.run(ctx);
      });
      res.on('error', close);
    });
    request.end();
  }
}

function responseHead(res: http.IncomingMessage, headers: readonly string[]): string {
  let head = `HTTP/1.1 ${res.statusCode ?? 502} ${res.statusMessage ?? ''}\r\n`;
  for (let i = 0; i + 1 < headers.length; i += 2) head += `${headers[i]}: ${headers[i + 1]}\r\n`;
  return `${head}\r\n`;
}

function hostName(host: string): string {
  if (host.startsWith('[')) return host.slice(1, Math.max(1, host.indexOf(']')));
  const colon = host.lastIndexOf(':');
  return colon === -1 ? host : host.slice(0, colon);
}
