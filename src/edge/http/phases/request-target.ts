/**
 * Phase 2, request target: what the request names, read once, the way the origin will read it.
 *
 * - The authority: exactly one. HTTP/1: a second Host header is refused (RFC 9112 3.2). HTTP/2
 *   (RFC 9113 8.3.1): a `host` header that differs from `:authority` is refused, and the origin
 *   gets one Host, `:authority`'s (headers.ts). An absolute-form target (`GET http://a/x`) whose
 *   authority differs from the Host header is refused: RFC 9112 3.2.2 has the target win, which an
 *   origin may do while the phases went by Host.
 * - HTTP/2 fields HTTP/1.1 would read as framing or hop-by-hop (RFC 9113 8.2.2): connection,
 *   keep-alive, proxy-connection, transfer-encoding, upgrade, and `te` other than `trailers`, are
 *   refused. nghttp2 already resets such streams; this keeps the rule whatever the library does.
 *   So is a content-length above 0 on a stream that ended with its headers (the body checks are
 *   in waf-request.ts and upstream/exchange.ts).
 * - The path: canonicalised by `request-target.ts` (the proxy's `requestTarget` settings); an
 *   ambiguous one is refused with 400 by default. `ctx.path` and `ctx.target` are what every later
 *   phase, the log and the origin use.
 *
 * Each refusal is 400 (the page with the support id), counted in tps_edge_refused_total{reason}
 * and logged with the reason.
 */
import type { Http2ServerRequest } from 'node:http2';
import type { RequestCtx } from '../ctx.ts';
import { canonicalTarget, type RequestRefusal } from '../request-target.ts';
import type { Answer, PhaseOutcome } from './answer.ts';
import { pageAnswer } from './respond.ts';
import type { RequestPhase } from './phase.ts';
import { isNamed } from '../header-name.ts';

/** HTTP/2 request fields that are connection-specific in HTTP/1.1 (RFC 9113 8.2.2). */
const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

export const requestTargetPhase: RequestPhase = {
  name: 'request-target',
  run(ctx: RequestCtx): PhaseOutcome {
    const refusal = ctx.http2 ? http2HeadRefusal(ctx) : http1HeadRefusal(ctx);
    if (refusal !== undefined) return refuse(ctx, refusal);
    const result = canonicalTarget(ctx.req.url ?? '', ctx.proxy.requestTarget);
    if (!result.ok) return refuse(ctx, result.reason);
    const { path, target, authority } = result.value;
    // Without a Host (HTTP/1.0) too: the phases and the origin would each pick their own authority.
    if (authority !== undefined && authority !== ctx.host.toLowerCase()) return refuse(ctx, 'HOST_MISMATCH');
    if (path === '*' && ctx.req.method !== 'OPTIONS') return refuse(ctx, 'MALFORMED_TARGET');
    ctx.path = path;
    ctx.target = target;
    return undefined;
  },
};

function http1HeadRefusal(ctx: RequestCtx): RequestRefusal | undefined {
  const raw = ctx.req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && isNamed(name, 'host')) hosts++;
  }
  return hosts > 1 ? 'DUPLICATE_HOST' : undefined;
}

function http2HeadRefusal(ctx: RequestCtx): RequestRefusal | undefined {
  const raw = ctx.req.rawHeaders;
  let authority: string | undefined;
  let hosts = 0;
  let host: string | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    const value = raw[i + 1]!;
    if (name === ':authority') authority = value;
    else if (name === 'host') {
      hosts++;
      host = value;
    } else if (CONNECTION_SPECIFIC.has(name)) return 'CONNECTION_HEADER';
    else if (name === 'te' && value.trim().toLowerCase() !== 'trailers') return 'TE_NOT_TRAILERS';
  }
  if (hosts > 1) return 'DUPLICATE_HOST';
  if (host !== undefined && authority !== undefined && host.toLowerCase() !== authority.toLowerCase()) return 'HOST_MISMATCH';
  // A length declared on a stream its HEADERS frame ended: no body will come, and an origin told
  // to wait for one would read the next request on its connection as that body.
  if (ctx.declaredLength > 0 && (ctx.req as Http2ServerRequest).stream.endAfterHeaders) return 'CONTENT_LENGTH_MISMATCH';
  return undefined;
}

/** 400, counted and logged; the body was not read, so an HTTP/1 connection closes after it. */
export function refuse(ctx: RequestCtx, reason: RequestRefusal): Answer {
  const proxy = ctx.proxy;
  proxy.deps.metrics?.requestRefused?.(proxy.id, ctx.http2 ? 'HTTP/2' : 'HTTP', reason);
  proxy.deps.logger?.warn(
    { proxyId: proxy.id, supportId: ctx.supportId, clientIp: ctx.clientIp, reason, url: ctx.req.url },
    'request refused: malformed or ambiguous',
  );
  return pageAnswer(ctx, 'request-target', 'bad-request', { close: true });
}
