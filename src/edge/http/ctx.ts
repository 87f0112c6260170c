/**
 * The one per-request state object every phase reads and fills (Pingora's `CTX`). Created when the
 * request head is parsed, with every field present from the start so that V8 sees one object shape.
 */
// Imported: on globalThis, Buffer, performance and process are accessors, a slow lookup on every use in the hot path.
import { Buffer } from 'node:buffer';
import { performance } from 'node:perf_hooks';
import { randomFillSync } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { PooledHost } from '../balance/index.ts';
import type { ClientAddressSource } from '../../net/types.ts';
import { FrontRequest } from './front/front-request.ts';
import type { ProxySnapshot } from './snapshot.ts';
import type { PhaseName } from './phases/answer.ts';
import type { WafEventDraft } from './waf/types.ts';

export type ClientRequest = IncomingMessage | Http2ServerRequest | FrontRequest;

/**
 * What the proxy does with a response to the client. Node's HTTP/1 `ServerResponse` and HTTP/2
 * compat `Http2ServerResponse` both have it, but their method unions are not callable in TypeScript.
 */
export interface ClientResponse {
  readonly headersSent: boolean;
  readonly writableEnded: boolean;
  /** Undefined on HTTP/2 compat responses. */
  readonly destroyed?: boolean;
  writeHead(statusCode: number, headers: string[]): unknown;
  write(chunk: Uint8Array): boolean;
  end(data?: string | Uint8Array): unknown;
  destroy(error?: Error): unknown;
  on(event: 'close', listener: () => void): unknown;
  once(event: 'drain', listener: () => void): unknown;
}

// Compile-time guards: both of Node's response classes fit.
const _http1: ClientResponse = null as unknown as ServerResponse;
const _http2: ClientResponse = null as unknown as Http2ServerResponse;
void _http1;
void _http2;

/** Verdict on the client's certificate, as forwarded in X-Client-Cert-Verified. */
export interface ClientCertificate {
  /** SUCCESS, FAILED:<OpenSSL reason such as CERT_REVOKED>, or NONE when the client sent none. */
  verified: string;
  /** RFC 4514-style subject (`CN=alice,O=Example`), empty without a certificate. */
  subject: string;
  /** SHA-256 of the DER certificate, lower-case hex without colons; empty without a certificate. */
  fingerprint: string;
}

/** The request body as the upstream phase will send it. */
export type RequestBody =
  | null
  /** Not read yet: streamed from the client as the origin takes it. */
  | 'stream'
  /** Read (in part) by the WAF phase: `chunks` first, then the rest of the stream if `rest` is set. */
  | { chunks: Buffer[]; length: number; rest: AsyncIterator<Buffer> | null };

export class RequestCtx {
  /** The configuration in force when the request arrived (later updates do not change it). */
  readonly proxy: ProxySnapshot;
  readonly req: ClientRequest;
  /** Absent for an upgrade (WebSocket) request, which answers on `upgradeSocket`. */
  readonly res: ClientResponse | undefined;
  readonly upgradeSocket: Duplex | undefined;
  readonly upgradeHead: Buffer | undefined;
  readonly http2: boolean;
  /** performance.now() at creation. */
  readonly startedAt: number;
  /** 32 hex; shown on our pages and put in insight events and the access log. */
  supportId: string;
  /** Forwarded as X-Request-Id: the client's own when it sent a sane one, else `supportId`. */
  requestId: string;

  // Filled by the accept phase.
  /** The client: the socket peer, or what a trusted load balancer said (`clientAddressSource`). */
  clientIp = '';
  clientPort = 0;
  /** Where `clientIp` came from (see src/net/client-address.ts). */
  clientAddressSource: ClientAddressSource = 'socket';
  /** Resolved from X-Forwarded-For: the entries left of the client, passed on to the origin before it. */
  forwardedForBefore: string | undefined = undefined;
  serverIp = '';
  serverPort = 0;
  secure = false;
  clientCertificate: ClientCertificate | undefined = undefined;
  /** Host header (HTTP/1) or :authority (HTTP/2), as sent. */
  host = '';
  /** Content-Length of the request; -1 when absent. */
  declaredLength = -1;

  // Filled by the request-target phase (request-target.ts): the one reading of the target.
  /** Canonical path: what the phases decide on. */
  path = '';
  /** Canonical path and the query as received: what the origin is sent. */
  target = '';

  /** Set by the WAF phase when it read the body; the upstream phase sends what it says. */
  body: RequestBody = null;

  /** The phase that answered (our own response), or 'upstream'. */
  answeredBy: PhaseName | undefined = undefined;
  /** Status sent to the client; 0 until a response head is sent. */
  statusCode = 0;
  /** The origin that answered, or the last one tried. */
  upstreamHost: PooledHost | undefined = undefined;
  upstreamAttempts = 0;
  /** Why the last origin attempt failed (error code), for the log. */
  upstreamError: string | undefined = undefined;
  /** The origin's response head was sent on to the client (the origin answered, not one of our pages). */
  originAnswered = false;
  /** performance.now() of the first origin connection attempt; -1 before. */
  upstreamStartedAt = -1;
  /** performance.now() when the origin's response head arrived; -1 before (and when none did: the end of the request counts). */
  upstreamAnsweredAt = -1;
  /** Request body bytes received from the client (read for the WAF, or streamed on). */
  bytesIn = 0;
  /** The body went to the origin as the client's stream itself, of the declared length: counted at the end. */
  bodyStreamedWhole = false;
  /** Response body bytes sent to the client (the origin's or our page's). */
  bytesOut = 0;
  /** The WAF could not inspect the request or response (its failMode decided). */
  wafUninspected = false;
  /** WAF matches to record as insight events once the final status is known. */
  wafEvents: WafEventDraft[] | undefined = undefined;
  /** The WAF hook gave a verdict on the request (it may keep an exchange until the request is over). */
  wafInspected = false;
  /** The origin exchange in flight, told when the client goes away so it stops the origin request. */
  upstreamExchange: { clientClosed(): void } | undefined = undefined;
  /** Set once the logging phase ran. */
  finished = false;

  private countryCode: string | undefined = undefined;

  constructor(proxy: ProxySnapshot, req: ClientRequest, res: ClientResponse | undefined, upgrade?: { socket: Duplex; head: Buffer }) {
    this.proxy = proxy;
    this.req = req;
    this.res = res;
    this.upgradeSocket = upgrade?.socket;
    this.upgradeHead = upgrade?.head;
    this.http2 = req.httpVersionMajor === 2;
    // A request the handle front end read started when its head was read: no second clock read.
    this.startedAt = req instanceof FrontRequest ? req.receivedAt : performance.now();
    this.supportId = newSupportId();
    this.requestId = this.supportId;
  }

  /** Country of the client address (looked up once, on first use). */
  get country(): string {
    if (this.countryCode === undefined) this.countryCode = this.proxy.deps.geo.country(this.clientIp);
    return this.countryCode;
  }
}

const ID_BYTES = 16;
const pool = Buffer.allocUnsafe(ID_BYTES * 256);
let poolOffset = pool.length;

/**
 * 32 lower-case hex characters: 16 random bytes, unique and not guessable. Taken from a pool refilled
 * 4 KiB at a time (one request in 256 pays for the randomness; the rest is one hex conversion),
 * which costs a fraction of `randomUUID().replaceAll('-', '')` on the hot path.
 */
export function newSupportId(): string {
  if (poolOffset === pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const id = pool.toString('hex', poolOffset, poolOffset + ID_BYTES);
  poolOffset += ID_BYTES;
  return id;
}
