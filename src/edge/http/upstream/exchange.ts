/**
 * The upstream exchange: sends the request to an origin and streams the response back, running
 * the response phases it is handed (their list: phases/index.ts, passed by the pipeline) on the
 * origin's response first: one may hold it back until it has decided (phase.ts says how).
 *
 * - The host comes from the proxy's `HostPool` (delivery method, passive health). A request without
 *   a body, or whose body is held whole (read for the WAF), goes through our own keep-alive client
 *   (`origin-client.ts`, the hot path); one whose body still streams through the host's undici pool.
 *   Bodies stream both ways with backpressure; only what the WAF inspects is buffered.
 * - A failed attempt is handed to the retry decision (retry-decision.ts: Pingora's fail_to_connect,
 *   error_while_proxy and fail_to_proxy), which says whether the request goes to another host,
 *   which error page answers, or whether the response is cut.
 *
 * This is the hot path of the benchmark: one handler object per request, no closure per chunk, the
 * response head passed to Node as a flat list, and a Content-Length body's last chunk sent with the
 * end of the response in one write. Running the response phases allocates nothing: a loop over
 * the shared list, and the index of the phase that holds the response.
 */
// Imported: on globalThis, Buffer, performance and process are accessors, a slow lookup on every use in the hot path.
import { Buffer } from 'node:buffer';
import { performance } from 'node:perf_hooks';
import net from 'node:net';
import type { Dispatcher } from 'undici';
import type { PooledHost } from '../../balance/index.ts';
import type { RequestCtx } from '../ctx.ts';
import { clientResponseHeaders, clientResponseHeadersInPlace, headerValue, originRequestHeaders } from '../headers.ts';
import { FrontResponse } from '../front/front-response.ts';
import type { OriginHandler } from './origin-client.ts';
import { isConnectFailure } from './origins.ts';
import { decideAfterFailure, failurePage } from './retry-decision.ts';
import type { HeldResponse, ResponsePhase, ResponseRelay } from '../phases/phase.ts';
import { respond, pageAnswer } from '../phases/respond.ts';
import type { Answer } from '../phases/answer.ts';

type OriginBody = null | Buffer | NodeJS.ReadableStream | AsyncIterable<Buffer>;

export function proxyToOrigin(ctx: RequestCtx, responsePhases: readonly ResponsePhase[]): void {
  new OriginExchange(ctx, responsePhases).attempt();
}

/** What a response phase did with the origin's response head. */
type HoldOutcome = 'passed' | 'deciding' | 'reading';

class ClientGoneError extends Error {
  readonly code = 'TPS_CLIENT_GONE';
}

/** The request body streamed past the proxy's size limit (`maxBodySize`). */
class BodyTooLargeError extends Error {
  readonly code = 'TPS_BODY_TOO_LARGE';
  constructor() {
    super('request body over the size limit');
  }
}

/**
 * One request's trip to the origins (all its attempts). It implements undici's native handler
 * interface (onConnect/onHeaders/onData/onComplete/onError), which our own origin client speaks too:
 * undici's controller-style interface wraps it and first parses the response head into an object,
 * which we would only take apart again.
 */
class OriginExchange implements Dispatcher.DispatchHandler, OriginHandler, ResponseRelay {
  private readonly ctx: RequestCtx;
  private readonly responsePhases: readonly ResponsePhase[];
  private readonly headers: string[];
  private readonly body: OriginBody;
  /** The body can be sent again (none, or held whole in memory). */
  private readonly replayable: boolean;
  private readonly method: string;
  private tried: Set<number> | undefined = undefined;
  private host: PooledHost | undefined = undefined;
  /** `HostPool.begin` was called for `host` and `end` not yet. */
  private counted = false;
  private abortAttempt: ((err?: Error) => void) | undefined = undefined;
  private resumeAttempt: (() => void) | undefined = undefined;
  private responseStarted = false;
  /** Response body bytes still expected by Content-Length (-1: unknown): the last chunk ends the response in one write. */
  private remaining = -1;
  /** Completed, failed for good, or abandoned: later callbacks only clean up. */
  private over = false;
  /** The client's response closed before the exchange was over. */
  clientGone = false;
  /** The failed attempt may be repeated on its own host (the retry decision's `sameHostIfLast`). */
  private retrySameHost = false;
  private resumeOnDrain: (() => void) | undefined = undefined;
  /** The origin's response while a response phase holds it back (the WAF's response side). */
  private held: HeldResponse | undefined = undefined;
  /** Index in `responsePhases` of the phase that holds `held`. */
  private holder = 0;

  constructor(ctx: RequestCtx, responsePhases: readonly ResponsePhase[]) {
    this.ctx = ctx;
    this.responsePhases = responsePhases;
    this.method = ctx.req.method ?? 'GET';
    this.headers = originRequestHeaders(ctx);
    if (ctx.body === null) {
      this.body = null;
      this.replayable = true;
    } else {
      const { body, replayable } = originBody(ctx);
      this.body = body;
      this.replayable = replayable;
    }
    ctx.upstreamExchange = this;
  }

  attempt(): void {
    const ctx = this.ctx;
    const origins = ctx.proxy.origins;
    let host = origins.hostPool.pick(ctx.clientIp, this.tried);
    if (host === undefined) {
      // Every host was tried. A single host gets one more chance after a broken kept-alive connection.
      if (ctx.upstreamAttempts === 1 && this.host !== undefined && this.retrySameHost) host = this.host;
      else return this.failToProxy();
    }
    this.retrySameHost = false;
    this.host = host;
    ctx.upstreamHost = host;
    ctx.upstreamAttempts++;
    if (ctx.upstreamStartedAt < 0) ctx.upstreamStartedAt = performance.now();
    origins.hostPool.begin(host);
    this.counted = true;
    this.responseStarted = false;
    this.remaining = -1;
    this.abortAttempt = undefined;
    this.resumeAttempt = undefined;
    // The canonical target the phases decided on (phases/request-target.ts), never the raw one.
    const path = ctx.target;
    const body = this.body;
    if (body === null || Buffer.isBuffer(body)) {
      // An HTTP/1.0 client may send no Host; HTTP/1.1 to the origin needs one (undici adds its own).
      const headers = ctx.host === '' ? [...this.headers, 'host', hostHeader(host)] : this.headers;
      const servername = origins.tls === undefined ? undefined : sniName(ctx.host);
      origins.originClients[host.index]!.request(this.method, path, headers, servername, this, body ?? undefined);
      return;
    }
    origins.pools[host.index]!.dispatch(
      {
        path,
        method: this.method,
        headers: this.headers,
        // undici's types want a Node Readable or an iterable; both are what we pass.
        body: this.body as Dispatcher.DispatchOptions['body'],
      },
      this,
    );
  }

  /** Called when the client's response closes before the exchange is over. */
  clientClosed(): void {
    if (this.over) return;
    this.clientGone = true;
    this.abortAttempt?.(new ClientGoneError('client went away'));
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortAttempt = abort;
    if (this.clientGone) abort(new ClientGoneError('client went away'));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[] | string[], resume: () => void): boolean {
    // 1xx interim responses (102, 103) are not relayed; the final response follows.
    if (statusCode < 200) return true;
    const ctx = this.ctx;
    ctx.upstreamAnsweredAt = performance.now();
    const host = this.host!;
    if (host.downUntil !== 0) ctx.proxy.origins.hostPool.markUp(host);
    this.responseStarted = true;
    this.resumeAttempt = resume;
    // Our origin client's list (strings) is ours to change, its names tokens already (response-head.ts); undici's (Buffers) is copied.
    const fromOriginClient = isStringList(rawHeaders);
    const flat = fromOriginClient ? clientResponseHeadersInPlace(rawHeaders) : clientResponseHeaders(rawHeaders);
    const outcome = this.runResponsePhases(0, statusCode, flat, undefined);
    if (outcome !== 'passed') return outcome === 'reading';
    if (this.method !== 'HEAD' && statusCode !== 204 && statusCode !== 304) {
      const length = headerValue(flat, 'content-length');
      if (length !== undefined) this.remaining = Number(length);
    }
    // The response phases cannot change the list (readonly to them): its names are still the origin client's tokens.
    this.sendHead(statusCode, flat, fromOriginClient);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.clientGone) return true;
    const held = this.held;
    if (held !== undefined) {
      held.chunks.push(chunk);
      held.length += chunk.length;
      const phase = this.responsePhases[this.holder]!;
      if (!phase.onResponseBody(this.ctx, held)) return true;
      phase.decide(this.ctx, held, this);
      return false;
    }
    const res = this.ctx.res!;
    this.ctx.bytesOut += chunk.length;
    if (this.remaining === chunk.length) {
      // The whole (rest of the) body: head, body and end leave in one write.
      this.remaining = 0;
      res.end(chunk);
      return true;
    }
    if (this.remaining > 0) this.remaining -= chunk.length;
    if (res.write(chunk)) return true;
    this.resumeOnDrain ??= () => this.resumeAttempt?.();
    res.once('drain', this.resumeOnDrain);
    return false;
  }

  onComplete(): void {
    this.release();
    this.over = true;
    this.ctx.upstreamExchange = undefined;
    if (this.clientGone) return;
    const held = this.held;
    if (held !== undefined) {
      held.ended = true;
      const phase = this.responsePhases[this.holder]!;
      if (phase.onResponseEnd(this.ctx, held)) phase.decide(this.ctx, held, this);
      return;
    }
    const res = this.ctx.res!;
    if (!res.writableEnded) res.end();
  }

  onError(err: Error): void {
    this.release();
    if (this.over || this.clientGone) {
      this.over = true;
      return;
    }
    const ctx = this.ctx;
    const code = errorCode(err);
    ctx.upstreamError = code;
    const host = this.host;
    if (host !== undefined) ctx.proxy.deps.metrics?.upstreamFailed?.(ctx.proxy.id, `${host.address}:${host.port}`, code);
    const decision = decideAfterFailure({
      code,
      beforeRequestSent: isConnectFailure(err),
      responseForwarded: this.responseStarted && this.held === undefined,
      responseHeld: this.held !== undefined,
      bodyTooLarge: err instanceof BodyTooLargeError,
      method: this.method,
      replayable: this.replayable,
    });
    switch (decision.action) {
      case 'cut-response':
        this.over = true;
        ctx.res!.destroy(err);
        return;
      case 'refuse':
        this.over = true;
        respond(
          ctx,
          decision.reason === 'body-too-large'
            ? pageAnswer(ctx, 'upstream', 'body-too-large', { close: true })
            : { phase: 'upstream', status: 400, headers: ['content-type', 'text/plain'], body: 'bad request\n', close: true },
        );
        return;
      case 'retry':
        if (host === undefined) break;
        if (decision.markHostDown) ctx.proxy.origins.hostPool.markDown(host);
        (this.tried ??= new Set()).add(host.index);
        this.retrySameHost = decision.sameHostIfLast;
        this.held = undefined;
        this.attempt();
        return;
      case 'fail':
        break;
    }
    this.failToProxy();
  }

  private failToProxy(): void {
    this.over = true;
    this.ctx.upstreamExchange = undefined;
    const ctx = this.ctx;
    respond(ctx, pageAnswer(ctx, 'upstream', failurePage(ctx.upstreamError), { close: this.body !== null && !this.replayable }));
  }

  private release(): void {
    if (!this.counted) return;
    this.counted = false;
    this.ctx.proxy.origins.hostPool.end(this.host!);
  }

  /** `namesAreTokens`: every name was checked as a token already (the handle front end then checks only the values). */
  private sendHead(status: number, headers: readonly string[], namesAreTokens = false): void {
    const ctx = this.ctx;
    ctx.answeredBy = 'upstream';
    ctx.originAnswered = true;
    ctx.statusCode = status;
    try {
      const res = ctx.res!;
      if (namesAreTokens && res instanceof FrontResponse) res.writeHeadOfTokens(status, headers);
      // Readonly to the response phases; writeHead only reads it.
      else res.writeHead(status, headers as string[]);
    } catch (err) {
      // A header HTTP/2 cannot carry, or a status Node refuses: the origin's response cannot be relayed.
      ctx.proxy.deps.logger?.warn({ err, proxyId: ctx.proxy.id, supportId: ctx.supportId }, 'origin response head refused');
      this.clientGone = true;
      this.remaining = -1;
      this.abortAttempt?.(err as Error);
      ctx.res!.destroy();
    }
  }

  /**
   * Offers the origin's response head to the response phases from `from` on. The first that holds
   * it keeps it, with what an earlier phase held of its body (`before`), until it decides
   * ('deciding': the origin's connection is to pause) or wants more of the body ('reading').
   * 'passed': no phase holds it, the response goes to the client.
   */
  private runResponsePhases(from: number, status: number, headers: readonly string[], before: HeldResponse | undefined): HoldOutcome {
    const ctx = this.ctx;
    const phases = this.responsePhases;
    for (let i = from; i < phases.length; i++) {
      const phase = phases[i]!;
      const held = phase.onResponseHead(ctx, this.method, status, headers);
      if (held === undefined) continue;
      this.held = held;
      this.holder = i;
      let decideNow = !held.wantsBody;
      if (before !== undefined) {
        for (const chunk of before.chunks) held.chunks.push(chunk);
        held.length = before.length;
        held.ended = before.ended;
        if (!decideNow && held.length > 0) decideNow = phase.onResponseBody(ctx, held);
        if (!decideNow && held.ended) {
          // The origin's body is complete: there is no more to wait for.
          phase.onResponseEnd(ctx, held);
          decideNow = true;
        }
      }
      if (decideNow) {
        phase.decide(ctx, held, this);
        return 'deciding';
      }
      // A later phase wants more of a body the origin was paused on.
      if (before !== undefined) this.resumeAttempt?.();
      return 'reading';
    }
    return 'passed';
  }

  /** A response phase replaces the held response with `answer` (a block, or 503 when it could not inspect). */
  replaceResponse(answer: Answer): void {
    const wasOver = this.over;
    this.over = true;
    this.ctx.upstreamExchange = undefined;
    if (!wasOver) this.abortAttempt?.(new Error('response blocked by the WAF'));
    respond(this.ctx, answer);
  }

  /** The phase that held the response lets it go on: to the phases after it, then to the client with the rest streaming. */
  releaseHeld(): void {
    const held = this.held!;
    this.held = undefined;
    if (this.clientGone) return;
    if (
      this.holder + 1 < this.responsePhases.length &&
      this.runResponsePhases(this.holder + 1, held.status, held.headers, held) !== 'passed'
    )
      return;
    this.sendHead(held.status, held.headers);
    if (this.clientGone) return;
    const res = this.ctx.res!;
    this.ctx.bytesOut += held.length;
    for (const chunk of held.chunks) res.write(chunk);
    if (held.ended) res.end();
    else this.resumeAttempt?.();
  }
}

function isStringList(list: Buffer[] | string[]): list is string[] {
  return list.length === 0 || typeof list[0] === 'string';
}

function hostHeader(host: PooledHost): string {
  return net.isIPv6(host.address) ? `[${host.address}]:${host.port}` : `${host.address}:${host.port}`;
}

/** SNI name for a TLS origin: the Host name, unless it is an IP literal (then none, as undici does). */
function sniName(host: string): string | undefined {
  let name = host;
  if (name.startsWith('[')) return undefined;
  const colon = name.lastIndexOf(':');
  if (colon !== -1) name = name.slice(0, colon);
  if (name === '' || net.isIP(name) !== 0) return undefined;
  return name;
}

/** What undici sends as the body, and whether it could be sent again. */
function originBody(ctx: RequestCtx): { body: OriginBody; replayable: boolean } {
  const body = ctx.body;
  const max = ctx.proxy.limits.maxBodySize;
  if (body === null) return { body: null, replayable: true };
  if (body === 'stream') {
    // A declared length is enforced by the parsers (and checked against the limit in accept);
    // otherwise (chunked, HTTP/2 without content-length) we count as it streams.
    // HTTP/2 frames the body in DATA frames: Node ends the stream even when they add up to less
    // than content-length (nghttp2 resets it only afterwards), so the length is checked here.
    if (ctx.http2 && ctx.declaredLength >= 0) return { body: limited(ctx, ctx.req as AsyncIterable<Buffer>, max), replayable: false };
    if (ctx.declaredLength >= 0) {
      // Counted at the end from the declared length, once the parser has taken it whole.
      ctx.bodyStreamedWhole = true;
      return { body: ctx.req, replayable: false };
    }
    return { body: limited(ctx, ctx.req as AsyncIterable<Buffer>, max), replayable: false };
  }
  if (body.rest === null) return { body: Buffer.concat(body.chunks, body.length), replayable: true };
  return { body: resumed(ctx, body.chunks, body.rest, max), replayable: false };
}

/**
 * The client's body as it streams, counted into `ctx.bytesIn` and held to `max` bytes (and, over
 * HTTP/2, to its declared length: the origin never gets a body that ends short of it).
 */
async function* limited(ctx: RequestCtx, source: AsyncIterable<Buffer>, max: number): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    ctx.bytesIn += chunk.length;
    if (ctx.bytesIn > max) throw new BodyTooLargeError();
    if (ctx.http2 && ctx.declaredLength >= 0 && ctx.bytesIn > ctx.declaredLength) throw new BodyLengthMismatchError();
    yield chunk;
  }
  if (ctx.http2 && ctx.declaredLength >= 0 && ctx.bytesIn !== ctx.declaredLength) throw new BodyLengthMismatchError();
}

/** The part the WAF read (counted already), then the rest as it streams. */
async function* resumed(ctx: RequestCtx, chunks: Buffer[], rest: AsyncIterator<Buffer>, max: number): AsyncGenerator<Buffer> {
  yield* chunks;
  for (;;) {
    const next = await rest.next();
    if (next.done) {
      if (ctx.http2 && ctx.declaredLength >= 0 && ctx.bytesIn !== ctx.declaredLength) throw new BodyLengthMismatchError();
      return;
    }
    ctx.bytesIn += next.value.length;
    if (ctx.bytesIn > max) throw new BodyTooLargeError();
    if (ctx.http2 && ctx.declaredLength >= 0 && ctx.bytesIn > ctx.declaredLength) throw new BodyLengthMismatchError();
    yield next.value;
  }
}

/** An HTTP/2 body whose DATA frames do not add up to its content-length (RFC 9113 8.1.1): never sent on whole. */
class BodyLengthMismatchError extends Error {
  readonly code = 'TPS_BODY_LENGTH_MISMATCH';
  constructor() {
    super('request body length differs from its content-length');
  }
}

function errorCode(err: Error): string {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : err.name;
}
