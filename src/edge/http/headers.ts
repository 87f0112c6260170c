/**
 * Header rewriting between the two segments.
 *
 * Towards the origin:
 * - hop-by-hop headers (RFC 9110 section 7.6.1: Connection and the names it lists, Keep-Alive,
 *   Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade) are dropped; undici frames the body.
 *   Expect is dropped too (Node already answered 100-continue to the client).
 * - X-Forwarded-For: the client's own value, if any, with the client address appended (the origin must
 *   trust only the last entry, ours). The client address is the socket peer, or the one resolved from
 *   a trusted load balancer (src/net/client-address.ts); when that came from X-Forwarded-For,
 *   the entries right of the client (the trusted hops) are dropped, so the last entry is the client.
 *   X-Real-IP is the client address alone. X-Forwarded-Proto and X-Forwarded-Host are replaced by ours.
 * - X-Request-Id: the client's when it sent a sane one, else our support id.
 * - X-Client-Cert-Verified / -Subject / -Fingerprint are always removed from the client's request and,
 *   with VERIFY_AND_FORWARD, set by us: the origin can trust them.
 * - HTTP/2: pseudo-headers become the request line and the one Host (a `host` field is not sent on:
 *   phases/request-target.ts refused one that differs); split Cookie headers are joined with
 *   "; " as RFC 9113 section 8.2.3 requires when forwarding to HTTP/1.1.
 *
 * Towards the client: the origin's hop-by-hop headers are dropped (Node frames the response; HTTP/2
 * forbids them).
 */
import { isNamed } from './header-name.ts';
import type { RequestCtx } from './ctx.ts';

/** Lower-case names never forwarded in either direction. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']);

/** Lower-case names of the request that we drop and (re)write ourselves. */
const REWRITTEN = new Set([
  ...HOP_BY_HOP,
  'expect',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-real-ip',
  'x-request-id',
  'x-client-cert-verified',
  'x-client-cert-subject',
  'x-client-cert-fingerprint',
  'http2-settings',
]);

/**
 * The request headers for the origin, as a flat `[name, value, ...]` list (undici's cheapest form).
 * `upgrade` keeps Connection: upgrade and the Upgrade header, for a WebSocket handshake.
 */
export function originRequestHeaders(ctx: RequestCtx, upgrade = false): string[] {
  const raw = ctx.req.rawHeaders;
  const out: string[] = [];
  let forwardedFor = '';
  let listed: Set<string> | undefined;
  let cookie: string | undefined;
  let upgradeValue: string | undefined;
  const http2 = ctx.http2;
  if (http2) out.push('host', ctx.host);
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    const value = raw[i + 1]!;
    if (http2 && name.charCodeAt(0) === 58 /* ':' */) continue;
    const lower = name.toLowerCase();
    if (REWRITTEN.has(lower)) {
      if (lower === 'x-forwarded-for') forwardedFor = forwardedFor === '' ? value : `${forwardedFor}, ${value}`;
      else if (lower === 'connection') listed = connectionTokens(value, listed);
      else if (lower === 'upgrade') upgradeValue = value;
      continue;
    }
    // The one Host is :authority's (above); a host field equal to it (a differing one was refused) is not sent twice.
    if (http2 && lower === 'host') continue;
    if (http2 && lower === 'cookie') {
      cookie = cookie === undefined ? value : `${cookie}; ${value}`;
      continue;
    }
    out.push(name, value);
  }
  if (listed !== undefined) removeListed(out, listed);
  if (cookie !== undefined) out.push('cookie', cookie);
  // Resolved from X-Forwarded-For: what the client claimed stays, the trusted hops after it go.
  if (ctx.forwardedForBefore !== undefined) forwardedFor = ctx.forwardedForBefore;
  out.push(
    'x-forwarded-for',
    forwardedFor === '' ? ctx.clientIp : `${forwardedFor}, ${ctx.clientIp}`,
    'x-real-ip',
    ctx.clientIp,
    'x-forwarded-proto',
    ctx.secure ? 'https' : 'http',
    'x-request-id',
    ctx.requestId,
  );
  if (ctx.host !== '') out.push('x-forwarded-host', ctx.host);
  const certificate = ctx.clientCertificate;
  if (certificate !== undefined && ctx.proxy.clientVerification === 'VERIFY_AND_FORWARD') {
    out.push('x-client-cert-verified', certificate.verified);
    if (certificate.subject !== '') out.push('x-client-cert-subject', certificate.subject);
    if (certificate.fingerprint !== '') out.push('x-client-cert-fingerprint', certificate.fingerprint);
  }
  if (upgrade && upgradeValue !== undefined) out.push('connection', 'upgrade', 'upgrade', upgradeValue);
  return out;
}

/**
 * The origin's response headers for the client, flat. `raw` is undici's raw list (Buffers or strings,
 * as on the wire); names are passed on as the origin spelled them (Node lower-cases them for HTTP/2).
 */
export function clientResponseHeaders(raw: readonly (Buffer | string)[]): string[] {
  return clientResponseHeadersInPlace(raw.map(latin1));
}

/**
 * `clientResponseHeaders` for a list the caller owns and will not read again (the origin client's,
 * strings): the same result, made in `flat` itself rather than in a copy.
 */
export function clientResponseHeadersInPlace(flat: string[]): string[] {
  let listed: Set<string> | undefined;
  let w = 0;
  for (let r = 0; r + 1 < flat.length; r += 2) {
    const name = flat[r]!;
    // Only names as long as a hop-by-hop one are lower-cased and looked up (this runs per response).
    const length = name.length;
    if (length === 2 || length === 7 || length === 10 || length === 16 || length === 17) {
      const lower = name.toLowerCase();
      if (HOP_BY_HOP.has(lower)) {
        if (lower === 'connection') listed = connectionTokens(flat[r + 1]!, listed);
        continue;
      }
    }
    if (w !== r) {
      flat[w] = name;
      flat[w + 1] = flat[r + 1]!;
    }
    w += 2;
  }
  flat.length = w;
  if (listed !== undefined) removeListed(flat, listed);
  return flat;
}

/** The first value of `lowerName` in a flat `[name, value, ...]` list, names in any case. */
export function headerValue(flat: readonly string[], lowerName: string): string | undefined {
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const name = flat[i]!;
    if (name.length === lowerName.length && isNamed(name, lowerName)) return flat[i + 1];
  }
  return undefined;
}

/** Header bytes as Node writes them back (latin1 round-trips every byte, obs-text included). */
function latin1(value: Buffer | string): string {
  return typeof value === 'string' ? value : value.toString('latin1');
}

/** Header names listed in a Connection value (besides close, keep-alive and upgrade); undefined when none. */
function connectionTokens(value: string, into: Set<string> | undefined): Set<string> | undefined {
  // What nearly every origin sends lists no header: nothing to split.
  if (value === 'keep-alive' || value === 'close') return into;
  let tokens = into;
  for (const token of value.split(',')) {
    const t = token.trim().toLowerCase();
    if (t !== '' && t !== 'close' && t !== 'keep-alive' && t !== 'upgrade') (tokens ??= new Set<string>()).add(t);
  }
  return tokens;
}

function removeListed(flat: string[], listed: Set<string>): void {
  if (listed.size === 0) return;
  let w = 0;
  for (let r = 0; r + 1 < flat.length; r += 2) {
    if (listed.has(flat[r]!.toLowerCase())) continue;
    flat[w++] = flat[r]!;
    flat[w++] = flat[r + 1]!;
  }
  flat.length = w;
}
