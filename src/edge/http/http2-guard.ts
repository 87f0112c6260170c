/**
 * Bounds of an HTTP/2 session that Node's server does not set by itself. HTTP/1 has them from Node's
 * own parser (`headersTimeout`, `requestTimeout`); HTTP/2 multiplexes requests on one session, so
 * they are kept here, per session and per stream:
 *
 * - **Rapid reset** (CVE-2023-44487): a client opens streams and resets them at once, so the
 *   concurrent-stream limit never bites while the proxy starts a request for each. Following Envoy
 *   (`isPrematureRstStream` / `maybeDrainDueToPrematureResets` in its connection manager, runtime
 *   keys `overload.premature_reset_total_stream_count` = 500 and
 *   `overload.premature_reset_min_stream_lifetime_seconds` = 1): a stream is reset prematurely when
 *   the client resets it before its response head was sent and within 1 s of opening it. Once 500
 *   streams of a session have closed with at least half of them premature, or 250 premature resets
 *   came even before that, the session is ended with GOAWAY ENHANCE_YOUR_CALM. Legitimate clients
 *   cancel some streams (a browser leaving a page), never half of hundreds. nghttp2 (Node 20.8+)
 *   also rate-limits RST_STREAM frames itself (1,000 at once, 33 a second) and ends the session with
 *   its own GOAWAY when a burst read in one go passes that before this count has seen the streams
 *   close; such a session (at least 100 streams reset by the client within 1 s of opening, half of
 *   its streams) is counted and logged the same. That count takes resets after a response head too:
 *   when the proxy answers at once (a 503 of a WAF that sheds load, a 429), Envoy's rule does not
 *   call them premature, yet nghttp2 ends the session for them all the same.
 * - **Headers deadline**: a session must open its first stream (complete request headers) within
 *   `headersTimeoutMs`, as an HTTP/1 connection must send its first request head; afterwards a
 *   session with no open stream for `idleTimeoutMs` is closed gracefully. Both count streams, not
 *   bytes, so a client trickling a header block (or PINGs) one byte at a time cannot hold a session.
 * - **Request deadline per stream**: a request's headers and body must be received within
 *   `requestTimeoutMs` (HTTP/1's `requestTimeout`): a slow POST over HTTP/2 gets 408 (or a reset
 *   once the response has started).
 *
 * One sweep timer per proxy checks the deadlines (at `connectionsCheckingIntervalMs`, like Node's
 * HTTP/1 check), so neither a session nor a stream costs a timer of its own.
 */
import http2 from 'node:http2';
import type { HttpLimits } from './limits.ts';

export type Http2Refusal = 'RAPID_RESET' | 'HEADERS_TIMEOUT' | 'REQUEST_TIMEOUT';

export interface Http2GuardLimits {
  /** Streams closed on a session before the share of premature resets decides (Envoy's default 500). */
  prematureResetStreams: number;
  /** A stream reset by the client sooner than this after opening, before its response head, is premature (Envoy: 1 s). */
  prematureResetLifetimeMs: number;
}

export const DEFAULT_HTTP2_GUARD_LIMITS: Readonly<Http2GuardLimits> = Object.freeze({
  prematureResetStreams: 500,
  prematureResetLifetimeMs: 1000,
});

export interface Http2GuardEvents {
  /** A session was ended, or a stream answered 408, for `reason`. */
  onRefused(reason: Http2Refusal, details: { remoteAddress: string | undefined; streams: number; premature: number }): void;
}

/** A session closed by someone else is put down to rapid reset only with this many client resets behind it. */
const MIN_STREAMS_FOR_BLAME = 100;

interface PendingStream {
  stream: http2.ServerHttp2Stream;
  openedAt: number;
}

class SessionState {
  readonly session: http2.ServerHttp2Session;
  readonly startedAt: number;
  /** Streams opened so far. */
  opened = 0;
  /** Streams closed so far, and how many of them the client reset prematurely. */
  closed = 0;
  premature = 0;
  /** Streams the client reset within the premature lifetime, answered or not (nghttp2's own limit counts these). */
  clientResets = 0;
  open = 0;
  /** Since when no stream has been open (the session's start for a new one). */
  idleSince: number;
  /** Streams whose request (headers and body) has not been received whole yet. */
  readonly receiving = new Set<PendingStream>();
  ended = false;

  constructor(session: http2.ServerHttp2Session, now: number) {
    this.session = session;
    this.startedAt = now;
    this.idleSince = now;
  }
}

export class Http2SessionGuard {
  readonly #limits: Pick<HttpLimits, 'headersTimeoutMs' | 'requestTimeoutMs' | 'idleTimeoutMs' | 'connectionsCheckingIntervalMs'>;
  readonly #guard: Http2GuardLimits;
  readonly #events: Http2GuardEvents;
  readonly #sessions = new Set<SessionState>();
  #sweeper: NodeJS.Timeout | undefined;

  constructor(limits: HttpLimits, events: Http2GuardEvents, guard: Partial<Http2GuardLimits> = {}) {
    this.#limits = limits;
    this.#guard = { ...DEFAULT_HTTP2_GUARD_LIMITS, ...guard };
    this.#events = events;
  }

  /** Sessions watched now (for tests). */
  get sessions(): number {
    return this.#sessions.size;
  }

  /** Watches a new session of the server (its 'session' event). */
  readonly watch = (session: http2.ServerHttp2Session): void => {
    const state = new SessionState(session, performance.now());
    this.#sessions.add(state);
    session.on('stream', (stream: http2.ServerHttp2Stream) => this.#onStream(state, stream));
    session.once('close', () => {
      this.#sessions.delete(state);
      // nghttp2's own RST_STREAM limit can end the session first (a burst read in one go, before our
      // count saw the streams close): the same abuse, counted the same.
      if (!state.ended && state.clientResets >= MIN_STREAMS_FOR_BLAME && state.clientResets * 2 >= state.closed) {
        state.ended = true;
        this.#events.onRefused('RAPID_RESET', { remoteAddress: undefined, streams: state.opened, premature: state.premature });
      }
    });
    this.#ensureSweeper();
  };

  /** Stops the sweep (the proxy stops; its sessions are closed by the listeners). */
  stop(): void {
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    this.#sweeper = undefined;
    this.#sessions.clear();
  }

  #onStream(state: SessionState, stream: http2.ServerHttp2Stream): void {
    const openedAt = performance.now();
    state.opened++;
    state.open++;
    const pending: PendingStream | undefined = stream.endAfterHeaders ? undefined : { stream, openedAt };
    if (pending !== undefined) state.receiving.add(pending);
    stream.once('close', () => {
      state.open--;
      state.closed++;
      if (pending !== undefined) state.receiving.delete(pending);
      const now = performance.now();
      if (state.open === 0) state.idleSince = now;
      // A reset by the client: closed with an error code we did not send, before any response head.
      const resetByClient = stream.rstCode !== undefined && stream.rstCode !== http2.constants.NGHTTP2_NO_ERROR && !closedByUs.has(stream);
      if (!resetByClient || now - openedAt >= this.#guard.prematureResetLifetimeMs) return;
      state.clientResets++;
      if (!stream.headersSent) {
        state.premature++;
        this.#checkPrematureResets(state);
      }
    });
  }

  #checkPrematureResets(state: SessionState): void {
    const limit = this.#guard.prematureResetStreams;
    // Envoy's rule: before `limit` streams closed, end the session once the premature ones alone
    // reach half of `limit` (even all-good streams from here on could not bring the share under
    // half); from then on, once they are half of all closed streams.
    const tooMany = state.closed < limit ? state.premature * 2 >= limit : state.premature * 2 >= state.closed;
    if (tooMany) this.#end(state, 'RAPID_RESET', http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }

  #end(state: SessionState, reason: Http2Refusal, code: number): void {
    if (state.ended) return;
    state.ended = true;
    this.#events.onRefused(reason, {
      remoteAddress: state.session.socket?.remoteAddress,
      streams: state.opened,
      premature: state.premature,
    });
    // destroy sends a GOAWAY with `code` and closes the socket: streams still open are cut. (The
    // number form: `destroy(undefined, code)` would take the default NO_ERROR for its first argument.)
    if (code === http2.constants.NGHTTP2_NO_ERROR) state.session.destroy();
    // Node documents and accepts a number here (the code); its typings only list an Error.
    else (state.session.destroy as unknown as (code: number) => void)(code);
  }

  #ensureSweeper(): void {
    if (this.#sweeper !== undefined) return;
    this.#sweeper = setInterval(this.#sweep, Math.max(10, this.#limits.connectionsCheckingIntervalMs));
    this.#sweeper.unref();
  }

  readonly #sweep = (): void => {
    const now = performance.now();
    const { headersTimeoutMs, requestTimeoutMs, idleTimeoutMs } = this.#limits;
    for (const state of this.#sessions) {
      if (state.ended || state.session.destroyed) {
        this.#sessions.delete(state);
        continue;
      }
      if (state.open === 0) {
        if (state.opened === 0 && headersTimeoutMs > 0 && now - state.idleSince > headersTimeoutMs) {
          this.#end(state, 'HEADERS_TIMEOUT', http2.constants.NGHTTP2_NO_ERROR);
        } else if (state.opened > 0 && idleTimeoutMs > 0 && now - state.idleSince > idleTimeoutMs) {
          // Idle, not abusive: a graceful GOAWAY, not counted.
          state.ended = true;
          state.session.close();
        }
        continue;
      }
      if (requestTimeoutMs <= 0) continue;
      for (const pending of state.receiving) {
        const stream = pending.stream;
        if (stream.destroyed || stream.closed || stream.state.remoteClose === 1) {
          state.receiving.delete(pending);
          continue;
        }
        if (now - pending.openedAt <= requestTimeoutMs) continue;
        state.receiving.delete(pending);
        this.#timeOutStream(state, stream);
      }
    }
    if (this.#sessions.size === 0 && this.#sweeper !== undefined) {
      clearInterval(this.#sweeper);
      this.#sweeper = undefined;
    }
  };

  #timeOutStream(state: SessionState, stream: http2.ServerHttp2Stream): void {
    this.#events.onRefused('REQUEST_TIMEOUT', {
      remoteAddress: state.session.socket?.remoteAddress,
      streams: state.opened,
      premature: state.premature,
    });
    closedByUs.add(stream);
    if (!stream.headersSent) {
      try {
        stream.respond({ ':status': 408, 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' });
        stream.end('request timeout\n');
      } catch {
        // The stream went away meanwhile.
      }
      // The client may not stop sending: the stream is reset shortly after the answer.
      setTimeout(() => {
        if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
      }, 1000).unref();
      return;
    }
    stream.close(http2.constants.NGHTTP2_CANCEL);
  }
}

/** Streams the proxy itself reset: their close is not the client's doing. */
const closedByUs = new WeakSet<http2.Http2Stream>();
