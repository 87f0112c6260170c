/**
 * Test origins and proxies on loopback: free ports, an echo origin (plain or TLS, optionally asking
 * for a client certificate), a minimal WebSocket echo, an insight sink that keeps events, and a
 * builder for `ResolvedHttpProxy`.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { HttpProxyAttributes } from '@tps/model';
import type { InsightEvent, InsightSink } from '@tps/model';
import { loadGeoLookup } from '../../src/edge/geo/geo-lookup.ts';
import type { HttpProxyDeps, ResolvedHttpProxy } from '../../src/edge/http/types.ts';
import { permissiveOriginGuard } from './origin-guard.ts';

/** Loopback addresses: the proxies' front end, the origins, and clients placed in countries. */
export const FRONT_IP = '127.0.0.2';
export const ORIGIN_IP = '127.0.0.3';
export const ORIGIN_IP_2 = '127.0.0.4';

import { freePort } from './ports.ts';

export { freePort };

export interface EchoReply {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  bodyLength: number;
  bodySha256: string;
  /** The origin's TLS view of the proxy's client certificate, when the origin speaks TLS. */
  peerCertificateFingerprint?: string;
  origin: string;
}

export interface TestOrigin {
  port: number;
  host: string;
  requests: number;
  close(): Promise<void>;
}

export interface OriginOptions {
  host?: string;
  name?: string;
  tls?: { certPem: string; keyPem: string; caPem?: string; requestCert?: boolean };
  /** Replaces the echo handler. */
  handler?: http.RequestListener;
  /** Answer WebSocket upgrades with an echo. */
  websocket?: boolean;
}

/** An origin answering every request with an `EchoReply` JSON (body hashed as it streams). */
export async function startOrigin(options: OriginOptions = {}): Promise<TestOrigin> {
  const host = options.host ?? ORIGIN_IP;
  const name = options.name ?? 'origin';
  const state = { requests: 0 };
  const handler: http.RequestListener =
    options.handler ??
    ((req, res) => {
      const hash = createHash('sha256');
      let length = 0;
      req.on('data', (chunk: Buffer) => {
        hash.update(chunk);
        length += chunk.length;
      });
      req.on('end', () => {
        const reply: EchoReply = {
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          bodyLength: length,
          bodySha256: hash.digest('hex'),
          origin: name,
        };
        const socket = req.socket as TLSSocket;
        if (typeof socket.getPeerCertificate === 'function') {
          const peer = socket.getPeerCertificate();
          if (peer?.fingerprint256) reply.peerCertificateFingerprint = peer.fingerprint256.replaceAll(':', '').toLowerCase();
        }
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(reply));
      });
    });
  const counted: http.RequestListener = (req, res) => {
    state.requests++;
    handler(req, res);
  };
  const server = options.tls
    ? https.createServer(
        {
          cert: options.tls.certPem,
          key: options.tls.keyPem,
          ...(options.tls.caPem !== undefined ? { ca: options.tls.caPem } : {}),
          requestCert: options.tls.requestCert === true,
          rejectUnauthorized: options.tls.requestCert === true,
        },
        counted,
      )
    : http.createServer(counted);
  if (options.websocket) server.on('upgrade', websocketEcho);
  const port = await freePort(host);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, resolve);
  });
  return {
    port,
    host,
    get requests() {
      return state.requests;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Accepts a WebSocket handshake and echoes text and binary frames (RFC 6455, enough for tests). */
function websocketEcho(req: http.IncomingMessage, socket: net.Socket, head: Buffer): void {
  const key = req.headers['sec-websocket-key'];
  if (typeof key !== 'string' || (req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
    socket.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n');
    return;
  }
  const accept = createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n` +
      `X-Seen-Forwarded-For: ${String(req.headers['x-forwarded-for'])}\r\n\r\n`,
  );
  let buffer = head;
  const onData = (chunk: Buffer): void => {
    buffer = Buffer.concat([buffer, chunk]);
    for (;;) {
      if (buffer.length < 2) return;
      const opcode = buffer[0]! & 0x0f;
      const masked = (buffer[1]! & 0x80) !== 0;
      let length = buffer[1]! & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (buffer.length < 4) return;
        length = buffer.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (buffer.length < 10) return;
        length = Number(buffer.readBigUInt64BE(2));
        offset = 10;
      }
      const maskOffset = offset;
      if (masked) offset += 4;
      if (buffer.length < offset + length) return;
      const payload = Buffer.from(buffer.subarray(offset, offset + length));
      if (masked) for (let i = 0; i < payload.length; i++) payload[i]! ^= buffer[maskOffset + (i % 4)]!;
      buffer = buffer.subarray(offset + length);
      if (opcode === 0x8) {
        socket.end(Buffer.from([0x88, 0x00]));
        return;
      }
      if (opcode === 0x1 || opcode === 0x2) {
        const header =
          payload.length < 126
            ? Buffer.from([0x80 | opcode, payload.length])
            : Buffer.from([0x80 | opcode, 126, payload.length >> 8, payload.length & 0xff]);
        socket.write(Buffer.concat([header, payload]));
      }
    }
  };
  socket.on('data', onData);
  // The proxy gone, the connection goes too (the server's sockets would stay half-open).
  socket.on('end', () => socket.end());
  socket.on('error', () => socket.destroy());
  if (head.length > 0) onData(Buffer.alloc(0));
}

/** An insight sink that keeps what it gets. */
export class MemorySink implements InsightSink {
  readonly events: InsightEvent[] = [];
  readonly updates: { eventId: string; update: { lastBlockedAt: string; blockedRequests: number; blockedUntil: string } }[] = [];

  record(event: InsightEvent): void {
    this.events.push(event);
  }

  updateRateLimitEpisode(eventId: string, update: { lastBlockedAt: string; blockedRequests: number; blockedUntil: string }): void {
    this.updates.push({ eventId, update });
  }
}

/**
 * Deps for tests: a memory sink, geo overrides only (no MMDB needed), location "TST", and an origin
 * guard that refuses nothing (the test origins are on loopback, which the product refuses by default).
 */
export function testDeps(overrides: Partial<HttpProxyDeps> = {}): HttpProxyDeps & { insight: MemorySink } {
  return {
    insight: new MemorySink(),
    geo: loadGeoLookup({ withoutMmdb: true, overrides: '127.0.0.20/32,DE\n127.0.0.21/32,US\n127.0.0.22/32,FR\n' }),
    location: 'TST',
    originGuard: permissiveOriginGuard(),
    ...overrides,
  } as HttpProxyDeps & { insight: MemorySink };
}

let revision = 0;

/** A resolved configuration on FRONT_IP:`port` towards `origins`, with the schema's defaults. */
export function resolvedProxy(
  port: number,
  origins: readonly { host: string; port: number }[],
  extra: {
    attributes?: Partial<Omit<HttpProxyAttributes, 'frontend' | 'backend'>> & {
      frontend?: Partial<HttpProxyAttributes['frontend']>;
      backend?: Partial<HttpProxyAttributes['backend']>;
    };
  } & Omit<Partial<ResolvedHttpProxy>, 'attributes'> = {},
): ResolvedHttpProxy {
  const { attributes = {}, ...rest } = extra;
  return {
    id: '00000000-0000-4000-8000-000000000001',
    tenantId: '00000000-0000-4000-8000-0000000000aa',
    revision: ++revision,
    ...rest,
    attributes: {
      ...attributes,
      frontend: { ipv4: FRONT_IP, port, ...attributes.frontend },
      backend: {
        hosts: origins.map((o) => ({ address: o.host, port: o.port })),
        deliveryMethod: 'LEAST_CONNECTIONS',
        ...attributes.backend,
      },
      waf: attributes.waf ?? { mode: 'BLOCKING', paranoiaLevel: 1, failMode: 'CLOSED', logMatchedData: false, ruleExclusions: [] },
    },
  };
}
