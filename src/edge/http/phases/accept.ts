/**
 * Phase 1, accept: who is asking, over what. Fills the client and server addresses from the socket
 * (the client address is the socket peer; only behind a load balancer the operator trusts, its PROXY
 * header or X-Forwarded-For: see src/net/client-address.ts), the TLS facts and the client
 * certificate verdict, and refuses what must not go further:
 * - VERIFY_AND_REJECT without an authorized certificate: 403. The TLS handshake already refuses such
 *   clients; this catches connections opened before the proxy's configuration asked for certificates.
 * - a declared body (Content-Length) over the size limit: 413 before reading any of it.
 */
import type { Http2ServerRequest } from 'node:http2';
import type { TLSSocket } from 'node:tls';
import type { ClientCertificate, RequestCtx } from '../ctx.ts';
import { pageAnswer } from './respond.ts';
import { unmapIpv4 } from '../../../net/ip.ts';
import type { PhaseOutcome } from './answer.ts';
import type { RequestPhase } from './phase.ts';
import { isNamed } from '../header-name.ts';

/** Per TLS connection: the certificate is the same for every request on it. */
const certificates = new WeakMap<object, ClientCertificate>();

export const acceptPhase: RequestPhase = {
  name: 'accept',
  run(ctx: RequestCtx): PhaseOutcome {
    const req = ctx.req;
    // For HTTP/2 this is a proxy of the session's socket that forwards these reads.
    const socket = req.socket;
    ctx.clientIp = unmapIpv4(socket.remoteAddress ?? '');
    ctx.clientPort = socket.remotePort ?? 0;
    ctx.serverIp = unmapIpv4(socket.localAddress ?? '');
    ctx.serverPort = socket.localPort ?? 0;
    ctx.secure = (socket as Partial<TLSSocket>).encrypted === true;
    const clientAddress = ctx.proxy.deps.clientAddress;
    let requestId: string | undefined;
    let declared: string | undefined;
    let forwardedFor: string | undefined;
    let chunked = false;
    if (ctx.http2) {
      const headers = req.headers;
      ctx.host = (headers[':authority'] as string | undefined) ?? headers.host ?? '';
      requestId = headers['x-request-id'] as string | undefined;
      declared = headers['content-length'];
      if (clientAddress !== undefined) {
        const value = headers['x-forwarded-for'];
        forwardedFor = Array.isArray(value) ? value.join(', ') : value;
      }
    } else {
      // One pass over the raw list: reading `req.headers` would make Node build the whole object.
      const raw = req.rawHeaders;
      for (let i = 0; i + 1 < raw.length; i += 2) {
        const name = raw[i]!;
        switch (name.length) {
          case 4:
            if (ctx.host === '' && isNamed(name, 'host')) ctx.host = raw[i + 1]!;
            break;
          case 12:
            if (isNamed(name, 'x-request-id')) requestId = raw[i + 1]!;
            break;
          case 14:
            if (isNamed(name, 'content-length')) declared = raw[i + 1]!;
            break;
          case 15:
            // Read only when someone is trusted to set it (Accept-Encoding/-Language have this length too).
            if (clientAddress !== undefined && isNamed(name, 'x-forwarded-for')) {
              forwardedFor = forwardedFor === undefined ? raw[i + 1]! : `${forwardedFor}, ${raw[i + 1]!}`;
            }
            break;
          case 17:
            if (isNamed(name, 'transfer-encoding')) chunked = true;
            break;
        }
      }
    }
    if (requestId !== undefined && requestId.length > 0 && requestId.length <= 128 && /^[\x21-\x7e]+$/.test(requestId)) {
      ctx.requestId = requestId;
    }
    ctx.declaredLength = declared === undefined ? -1 : Number(declared);
    if (clientAddress !== undefined) {
      const resolved = clientAddress.resolveRequest(ctx.clientIp, ctx.clientPort, socket, forwardedFor);
      if (resolved !== undefined) {
        ctx.clientIp = resolved.ip;
        ctx.clientPort = resolved.port;
        ctx.clientAddressSource = resolved.source;
        ctx.forwardedForBefore = resolved.forwardedForBefore;
      }
    }

    const proxy = ctx.proxy;
    if (proxy.clientVerification !== undefined) {
      // The cache key must live as long as the connection: the HTTP/2 socket proxy is per stream.
      const connection: object = ctx.http2 ? ((req as Http2ServerRequest).stream.session ?? socket) : socket;
      const certificate = ctx.secure ? clientCertificate(socket as TLSSocket, connection) : NO_CERTIFICATE;
      ctx.clientCertificate = certificate;
      if (proxy.clientVerification === 'VERIFY_AND_REJECT' && certificate.verified !== 'SUCCESS') {
        return pageAnswer(ctx, 'accept', 'client-certificate', { close: true });
      }
    }

    if (ctx.declaredLength > proxy.limits.maxBodySize) return pageAnswer(ctx, 'accept', 'body-too-large', { close: true });
    ctx.body = ctx.upgradeSocket === undefined && hasBody(ctx, chunked) ? 'stream' : null;
    return undefined;
  },
};

/** HTTP/1: a length above 0 or chunked framing. HTTP/2: the HEADERS frame did not end the stream. */
function hasBody(ctx: RequestCtx, chunked: boolean): boolean {
  if (ctx.declaredLength === 0) return false;
  if (ctx.http2) return (ctx.req as Http2ServerRequest).stream.endAfterHeaders !== true;
  return ctx.declaredLength > 0 || chunked;
}

const NO_CERTIFICATE: ClientCertificate = Object.freeze({ verified: 'NONE', subject: '', fingerprint: '' });

function clientCertificate(socket: TLSSocket, connection: object): ClientCertificate {
  let result = certificates.get(connection);
  if (result !== undefined) return result;
  const peer = socket.getPeerCertificate();
  if (peer === null || peer === undefined || peer.raw === undefined) {
    result = NO_CERTIFICATE;
  } else {
    result = {
      verified: socket.authorized ? 'SUCCESS' : `FAILED:${String(socket.authorizationError ?? 'UNKNOWN')}`,
      subject: formatSubject(peer.subject as unknown as Record<string, string | string[]> | undefined),
      fingerprint: (peer.fingerprint256 ?? '').replaceAll(':', '').toLowerCase(),
    };
  }
  certificates.set(connection, result);
  return result;
}

/** RFC 4514 style (`CN=alice,O=Example`), special characters escaped, kept on one header line. */
function formatSubject(subject: Record<string, string | string[]> | undefined): string {
  if (subject === undefined) return '';
  const parts: string[] = [];
  for (const [key, value] of Object.entries(subject)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      const escaped = one
        .replace(/[\\,+"<>;=]/g, (c) => `\\${c}`)
        .replace(/^([ #])/, '\\$1')
        .replace(/ $/, '\\ ')
        // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it escapes
        .replace(/[\x00-\x1f\x7f]/g, (c) => `\\${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
      parts.push(`${key}=${escaped}`);
    }
  }
  return parts.join(',');
}
