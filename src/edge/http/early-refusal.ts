/**
 * The early refusal path: HTTP/1 connections of a source the rate limit has blocked, answered
 * without Node's HTTP parser and without any per-request object of ours (DESIGN.md "Cost": refuse
 * as early as the decision allows). Once a connection is known to belong to a blocked source (a new
 * connection at accept, or a kept-alive one when its next request arrives: see HttpProxy), it is
 * taken out of `node:http` and every request head on it (request-heads.ts finds where each ends,
 * pipelined ones included) gets the same prebuilt 429 in one write: the block page with the
 * episode's support id and `Retry-After`, the bytes rebuilt at most once a second per episode (the
 * Date and Retry-After values change). The refusals are counted in the episode (so its insight
 * event says how many) and in one integer per proxy, taken into `/metrics` by the proxy.
 *
 * When the block ends the connection goes back to the HTTP server with the bytes not yet answered,
 * and is served as any other. A head that announces a body, asks to close, or is not understood
 * is the last one answered (400 for the last): the connection is then closed the lingering way,
 * so that a body is never taken for requests.
 */
import type net from 'node:net';
import { renderPage } from './block-page.ts';
import type { RateEpisode, RateLimiter } from './rate-limit/limiter.ts';
import { nextHead } from './request-heads.ts';

export interface EarlyRefusalHost {
  /** The rate limiter in force (the proxy's current snapshot's), if any. */
  limiter(): RateLimiter | undefined;
  /** Shown on the block page. */
  readonly location: string;
  readonly maxHeaderSize: number;
  /** A refused connection with no request under way is closed after this long. */
  readonly keepAliveTimeoutMs: number;
  /** A refused connection whose request head is not complete after this long is closed. */
  readonly headersTimeoutMs: number;
}

/** One refused request's answer: the whole response, and the length of its head (for HEAD requests). */
export interface PrebuiltRefusal {
  readonly bytes: Buffer;
  readonly headLength: number;
}

interface CachedRefusal extends PrebuiltRefusal {
  readonly retryAfter: number;
  readonly second: number;
  readonly body: Buffer;
}

const EMPTY: Buffer = Buffer.alloc(0);
const BAD_REQUEST = Buffer.from('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n', 'latin1');
/** As respond.ts's lingering close: how long a closing connection keeps dropping what still arrives. */
const LINGER_MS = 5_000;

export class EarlyRefusals {
  private readonly host: EarlyRefusalHost;
  private readonly sockets = new Set<net.Socket>();
  private readonly cache = new WeakMap<RateEpisode, CachedRefusal>();
  /** Requests refused on this path since the last `takeRefusedCount`. */
  private refused = 0;

  constructor(host: EarlyRefusalHost) {
    this.host = host;
  }

  /** Connections currently refused here (for tests and metrics). */
  get connections(): number {
    return this.sockets.size;
  }

  /** The requests refused since the last call (the proxy adds them to its metrics). */
  takeRefusedCount(): number {
    const count = this.refused;
    this.refused = 0;
    return count;
  }

  /** Counts one request refused elsewhere on this path (the first one of a kept-alive connection). */
  countRefused(): void {
    this.refused++;
  }

  /**
   * The 429 of `episode` now. The keep-alive form is cached per episode for the current second and
   * Retry-After value; the closing form (once per connection at most) is built each time.
   */
  response(episode: RateEpisode, now: number, close: boolean): PrebuiltRefusal {
    const retryAfter = Math.max(1, Math.ceil((episode.blockedUntil - now) / 1000));
    const second = Math.floor(now / 1000);
    const cached = this.cache.get(episode);
    if (!close && cached !== undefined && cached.retryAfter === retryAfter && cached.second === second) return cached;
    const body = cached?.body ?? Buffer.from(renderPage('rate-limit', episode.supportId, this.host.location, 429), 'utf8');
    const head = Buffer.from(
      'HTTP/1.1 429 Too Many Requests\r\n' +
        'content-type: text/html; charset=utf-8\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n' +
        `retry-after: ${retryAfter}\r\ndate: ${new Date(second * 1000).toUTCString()}\r\n` +
        `content-length: ${body.length}\r\nconnection: ${close ? 'close' : 'keep-alive'}\r\n\r\n`,
      'latin1',
    );
    const built: CachedRefusal = { bytes: Buffer.concat([head, body]), headLength: head.length, retryAfter, second, body };
    if (!close) this.cache.set(episode, built);
    return built;
  }

  /**
   * Answers every request head arriving on `socket` (a connection no HTTP server reads any more)
   * while `key`'s block lasts, starting with the bytes `pending`; when it ends, `handBack` gives the
   * connection to the HTTP server with the bytes not answered.
   */
  takeOver(socket: net.Socket, key: string, pending: Buffer, handBack: (rest: Buffer) => void): void {
    const host = this.host;
    const sockets = this.sockets;
    sockets.add(socket);
    let buffered: Buffer = EMPTY;
    let partialSince = 0;
    const release = (): void => {
      socket.removeListener('data', onData);
      socket.removeListener('timeout', onTimeout);
      socket.removeListener('error', onError);
      socket.removeListener('close', onClose);
      sockets.delete(socket);
    };
    const onTimeout = (): void => {
      socket.destroy();
    };
    const onError = (): void => {
      socket.destroy();
    };
    const onClose = (): void => {
      sockets.delete(socket);
    };
    const onData = (chunk: Buffer): void => {
      const buffer = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      buffered = EMPTY;
      const now = Date.now();
      let from = 0;
      // The answers to the heads of one read go out in one write (a writev of one buffer costs more).
      let answers: Buffer | Buffer[] | undefined;
      for (;;) {
        const scan = nextHead(buffer, from, host.maxHeaderSize);
        if (scan.kind === 'incomplete') {
          if (scan.start < buffer.length) {
            buffered = buffer.subarray(scan.start);
            if (partialSince === 0) partialSince = now;
            else if (now - partialSince > host.headersTimeoutMs) socket.destroy();
          }
          break;
        }
        if (scan.kind === 'bad') {
          release();
          closeLingering(socket, joined(answers, BAD_REQUEST));
          return;
        }
        const episode = host.limiter()?.refuseBlocked(key, 1);
        if (episode === undefined) {
          release();
          if (answers !== undefined) socket.write(joined(answers, EMPTY));
          handBack(buffer.subarray(from));
          return;
        }
        this.refused++;
        partialSince = 0;
        const answer = this.response(episode, now, scan.close);
        const bytes = scan.head ? answer.bytes.subarray(0, answer.headLength) : answer.bytes;
        if (scan.close) {
          release();
          closeLingering(socket, joined(answers, bytes));
          return;
        }
        if (answers === undefined) answers = bytes;
        else if (Array.isArray(answers)) answers.push(bytes);
        else answers = [answers, bytes];
        from = scan.next;
      }
      if (answers !== undefined) socket.write(joined(answers, EMPTY));
      // A client that sends but does not read must not grow our write buffer: stop reading until it does.
      if (socket.writableNeedDrain) {
        socket.pause();
        socket.once('drain', () => socket.resume());
      }
    };
    socket.setTimeout(host.keepAliveTimeoutMs);
    socket.on('timeout', onTimeout);
    socket.on('error', onError);
    socket.on('close', onClose);
    socket.on('data', onData);
    if (pending.length > 0) onData(pending);
  }

  /**
   * Answers the first refused request of a connection Node's parser read (its head is gone from the
   * stream), then takes the connection over with the bytes after it, or closes it when `close`.
   */
  refuseFirst(
    socket: net.Socket,
    episode: RateEpisode,
    first: { key: string; head: boolean; close: boolean },
    rest: Buffer,
    handBack: (rest: Buffer) => void,
  ): void {
    this.refused++;
    const answer = this.response(episode, Date.now(), first.close);
    const bytes = first.head ? answer.bytes.subarray(0, answer.headLength) : answer.bytes;
    if (first.close) {
      socket.on('error', () => socket.destroy());
      closeLingering(socket, bytes);
      return;
    }
    socket.write(bytes);
    this.takeOver(socket, first.key, rest, handBack);
  }

  /** Cuts every connection refused here (the proxy stops: they wait for nothing). */
  stop(): void {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }
}

/** The answers gathered so far followed by `last`, as one buffer. */
function joined(answers: Buffer | Buffer[] | undefined, last: Buffer): Buffer {
  if (answers === undefined) return last;
  if (Array.isArray(answers)) return Buffer.concat(last.length === 0 ? answers : [...answers, last]);
  return last.length === 0 ? answers : Buffer.concat([answers, last]);
}

/**
 * Writes the last answer and closes the lingering way (respond.ts): closing with unread bytes
 * would reset the connection and the client could lose the answer, so what still arrives is read
 * and dropped until the client closes its side, for at most LINGER_MS.
 */
function closeLingering(socket: net.Socket, last: Buffer): void {
  socket.end(last);
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once('end', () => socket.destroy());
  socket.once('close', () => clearTimeout(timer));
  socket.resume();
}
