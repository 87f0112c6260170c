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
 * A refused connection is read into one buffer per proxy, without a Buffer per read nor the
 * stream's events, and its answers written to its handle without the stream's layer, where Node
 * allows (stream-handle.ts; else readIntoSharedBuffer and `socket.write`). It cannot go back to
 * Node's parser: when the block ends, its next request gets a last 429 (Retry-After: 1) with
 * `Connection: close`, and the source's next connection is served as any other. A head that
 * announces a body, asks to close, or is not understood is the last one answered (400 for the
 * last): the connection is then closed the lingering way, so that a body is never taken for
 * requests.
 */
import type net from 'node:net';
import { Socket } from 'node:net';
import { renderPage } from './block-page.ts';
import { type HandleReader, readFromHandle, type StreamHandle, writeToHandle } from './stream-handle.ts';
import type { RateEpisode, RateLimiter } from './rate-limit/limiter.ts';
import { HeadScanner } from './request-heads.ts';
import { lingerAfterEnd } from './lingering-close.ts';
import { httpDate } from './http-date.ts';
import { type EngineAnswerSource, type EngineConnection, type HandBackKind, type RefusalEngine, refusalEngine } from './refusal-engine.ts';

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
  /**
   * Each request refused on a connection whose source is its socket peer (the kernel-blocking
   * escalation's input, as the rate-limit phase reports its own refusals); absent: kernel blocking is off.
   */
  readonly onBlockedRefusal?: ((key: string, blockedUntil: number, requests?: number) => void) | undefined;
}

/** One refused request's answer: the whole response, and the length of its head (for HEAD requests). */
export interface PrebuiltRefusal {
  readonly bytes: Buffer;
  readonly headLength: number;
}

interface CachedRefusal extends PrebuiltRefusal {
  readonly episode: RateEpisode;
  readonly retryAfter: number;
  readonly second: number;
  readonly body: Buffer;
}

const EMPTY: Buffer = Buffer.alloc(0);
/** Longer heads are not handed to the native engine (it copies the head of each connection it serves); a flood's are far shorter. */
const MAX_ENGINE_HEAD_BYTES = 1024;
/** How often refused connections are checked against their deadline. */
const SWEEP_MS = 1_000;

const BAD_REQUEST = Buffer.from('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n', 'latin1');

export class EarlyRefusals {
  readonly host: EarlyRefusalHost;
  /** Each refused connection, with its deadline (ms): idle, or a request head that is too slow. */
  private readonly sockets = new Map<net.Socket, RefusedConnection>();
  /** A refused socket closed ('close' listener, `this` the socket): it is no longer swept. */
  private readonly forget: (this: net.Socket) => void;
  /** Closes connections past their deadline; runs while there are any (a timer per socket costs a refresh per read and write). */
  private sweeper: NodeJS.Timeout | undefined;
  private readonly cache = new WeakMap<RateEpisode, CachedRefusal>();
  private readonly engineAnswers = new WeakMap<RateEpisode, EngineAnswerSource>();
  /** Requests refused on this path since the last `takeRefusedCount`. */
  private refused = 0;
  /** Connections read into `readBuffer` so far (the others, on another Node, read 'data' events). */
  sharedReads = 0;
  /** Answers written straight to the socket's handle so far (stream-handle.ts; the others: `socket.write`). */
  directWrites = 0;
  /**
   * Where refused connections are read into, one read at a time (all on this thread): no buffer is
   * allocated per read. What a read leaves unanswered (a partial head) is copied out.
   */
  readonly readBuffer = Buffer.allocUnsafe(64 * 1024);
  /** Every refused connection's heads, the last one remembered: a flood repeats it. */
  readonly heads: HeadScanner;

  constructor(host: EarlyRefusalHost) {
    this.host = host;
    this.heads = new HeadScanner(host.maxHeaderSize);
    const sockets = this.sockets;
    this.forget = function (this: net.Socket): void {
      sockets.get(this)?.leaveEngine();
      sockets.delete(this);
    };
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

  /** Counts requests refused elsewhere on this path (the first one of a kept-alive connection, the native engine's). */
  countRefused(requests = 1): void {
    this.refused += requests;
  }

  /** What the native engine answers for `episode` (refusal-engine.ts): the keep-alive 429 of this proxy, renewed each second. */
  engineAnswer(episode: RateEpisode): EngineAnswerSource {
    let source = this.engineAnswers.get(episode);
    if (source === undefined) {
      source = {
        current: (now: number) => {
          const answer = this.response(episode, now, false);
          return { bytes: answer.bytes, headLength: answer.headLength, blockedForMs: episode.blockedUntil - now };
        },
      };
      this.engineAnswers.set(episode, source);
    }
    return source;
  }

  /**
   * The 429 of `episode` now. The keep-alive form is cached per episode for the current second and
   * Retry-After value; the closing form (once per connection at most) is built each time. `kept`:
   * the last answer `response` gave the caller.
   */
  response(episode: RateEpisode, now: number, close: boolean, kept?: PrebuiltRefusal): PrebuiltRefusal {
    const retryAfter = Math.max(1, Math.ceil((episode.blockedUntil - now) / 1000));
    const second = Math.floor(now / 1000);
    // `kept`: the connection's last answer, which spares the table's lookup when it is still the one.
    const last = kept as CachedRefusal | undefined;
    if (!close && last !== undefined && last.episode === episode && last.retryAfter === retryAfter && last.second === second) return last;
    const cached = this.cache.get(episode);
    if (!close && cached !== undefined && cached.retryAfter === retryAfter && cached.second === second) return cached;
    const body = cached?.body ?? Buffer.from(renderPage('rate-limit', episode.supportId, this.host.location, 429), 'utf8');
    const head = Buffer.from(
      'HTTP/1.1 429 Too Many Requests\r\n' +
        'content-type: text/html; charset=utf-8\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n' +
        `retry-after: ${retryAfter}\r\ndate: ${httpDate(second)}\r\n` +
        `content-length: ${body.length}\r\nconnection: ${close ? 'close' : 'keep-alive'}\r\n\r\n`,
      'latin1',
    );
    const built: CachedRefusal = { bytes: Buffer.concat([head, body]), headLength: head.length, episode, retryAfter, second, body };
    if (!close) this.cache.set(episode, built);
    return built;
  }

  /**
   * Answers the first refused request of a connection Node's parser read (its head is gone from the
   * stream), then takes the connection over with the bytes after it, or closes it when `close`.
   */
  refuseFirst(
    socket: net.Socket,
    episode: RateEpisode,
    first: { key: string; peer: boolean; head: boolean; close: boolean },
    rest: Buffer,
  ): void {
    this.refused++;
    if (first.peer) this.host.onBlockedRefusal?.(first.key, episode.blockedUntil);
    const answer = this.response(episode, Date.now(), first.close);
    const bytes = first.head ? answer.bytes.subarray(0, answer.headLength) : answer.bytes;
    if (first.close) {
      socket.on('error', onError);
      closeLingering(socket, bytes);
      return;
    }
    socket.write(bytes);
    this.takeOver(socket, first.key, first.peer, rest, episode);
  }

  /**
   * Answers every request head arriving on `socket` (a connection no HTTP server reads any more)
   * while `key`'s block lasts, starting with the bytes `pending`. The first head after the block
   * ended gets a last 429 (Retry-After: 1) with `Connection: close`: the client's next connection
   * is served (a connection read into the shared buffer cannot be handed back to Node's parser).
   */
  takeOver(socket: net.Socket, key: string, peer: boolean, pending: Buffer, episode: RateEpisode): void {
    const connection = new RefusedConnection(this, this, socket, key, peer, episode);
    // refuseFirst wrote with socket.write: until its Writable is empty, the answers go behind it.
    connection.streamWrites = socket.writableLength > 0;
    this.sockets.set(socket, connection);
    this.sweep();
    // Node's server armed its idle timer on the socket: the sweep stands for it now.
    socket.setTimeout(0);
    socket.on('error', onError);
    socket.on('close', this.forget);
    // Half-open connections are allowed on the server's sockets: a client that is done is let go.
    socket.once('end', onEnd);
    // Bytes a reader before us left in the stream (a PROXY header's reader) come first.
    const already = socket.readableLength > 0 ? (socket.read() as Buffer | null) : null;
    const first = already === null ? pending : pending.length === 0 ? already : Buffer.concat([pending, already]);
    const handle = readFromHandle(socket, this.readBuffer, connection);
    if (handle !== undefined) {
      connection.handle = handle;
      connection.sharedBuffer = true;
      socket.resume();
    } else {
      connection.sharedBuffer = readIntoSharedBuffer(socket, this.readBuffer, (chunk) => connection.onData(chunk));
    }
    if (connection.sharedBuffer) {
      this.sharedReads++;
    } else {
      socket.on('data', (chunk: Buffer) => {
        if (!connection.onData(chunk)) socket.pause();
      });
    }
    if (first.length > 0 && !connection.onData(first)) {
      // After the tick in which the stream's resume starts reading.
      if (connection.sharedBuffer) process.nextTick(stopReading, socket);
      else socket.pause();
    }
  }

  /** No longer swept nor cut by `stop` (its connection closes the lingering way). */
  untrack(socket: net.Socket): void {
    socket.removeListener('close', this.forget);
    this.sockets.delete(socket);
  }

  /** Cuts every connection refused here (the proxy stops: they wait for nothing). */
  stop(): void {
    for (const [socket, connection] of this.sockets) {
      connection.leaveEngine();
      socket.destroy();
    }
    this.sockets.clear();
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }

  /**
   * Cuts the connections refused here for `key` (a source whose packets the kernel drops from now
   * on: what it still has open would only wait for their deadline). How many there were.
   */
  closeConnectionsOf(key: string): number {
    let closed = 0;
    for (const [socket, connection] of this.sockets) {
      if (connection.key !== key) continue;
      socket.destroy();
      closed++;
    }
    return closed;
  }

  /** Starts the sweep if it is not running: once a second, connections past their deadline are cut. */
  private sweep(): void {
    if (this.sweeper !== undefined) return;
    this.sweeper = setInterval(() => {
      const now = Date.now();
      for (const [socket, connection] of this.sockets) if (connection.at < now) socket.destroy();
      if (this.sockets.size === 0) {
        clearInterval(this.sweeper);
        this.sweeper = undefined;
      }
    }, SWEEP_MS);
    this.sweeper.unref();
  }
}

function onError(this: net.Socket): void {
  this.destroy();
}

function onEnd(this: net.Socket): void {
  this.destroy();
}

/**
 * Node's reads into a caller's buffer (the `onread` option of `net.Socket`), put on a socket the
 * server made: reads then skip the Buffer allocated per read and the stream's push and 'data'
 * event, about half of the user-space cost of a refusal in bench/flood. `onread` is public for
 * sockets one creates; for an accepted one this sets what the option sets (the socket's
 * `kBuffer`/`kBufferCb` slots and the handle's `useUserBuffer`), found by name: where they are
 * missing (another Node), false, and the caller reads 'data' events instead. Checked by
 * early-refusal.test.ts. Where Node's internals allow, the reads skip the socket's reader too
 * (stream-handle.ts's readFromHandle, tried first).
 */
function readIntoSharedBuffer(socket: net.Socket, buffer: Buffer, onData: (chunk: Buffer) => boolean): boolean {
  const handle = (socket as unknown as { _handle?: StreamHandle | null })._handle;
  if (READ_SLOTS === undefined || handle === null || handle === undefined || typeof handle.useUserBuffer !== 'function') return false;
  const slots = socket as unknown as Record<symbol, unknown>;
  slots[READ_SLOTS.buffer] = buffer;
  // Node stops reading on false; the caller starts it again once the client has read what we wrote.
  slots[READ_SLOTS.callback] = (bytes: number): boolean => onData(buffer.subarray(0, bytes));
  handle.useUserBuffer(buffer);
  socket.resume();
  return true;
}

/** The socket's own slots for `onread`, found on a socket made without a handle (no descriptor). */
const READ_SLOTS = ((): { buffer: symbol; callback: symbol } | undefined => {
  const symbols = Object.getOwnPropertySymbols(new Socket());
  const buffer = symbols.find((symbol) => symbol.description === 'kBuffer');
  const callback = symbols.find((symbol) => symbol.description === 'kBufferCb');
  return buffer !== undefined && callback !== undefined ? { buffer, callback } : undefined;
})();

function resumeReading(socket: net.Socket): void {
  const handle = (socket as unknown as { _handle?: StreamHandle | null })._handle;
  if (socket.destroyed || handle === null || handle === undefined || handle.reading === true) return;
  handle.reading = true;
  handle.readStart?.();
}

/** The first bytes' answers could not all be written: reading waits until the client reads. */
function stopReading(socket: net.Socket): void {
  const handle = (socket as unknown as { _handle?: StreamHandle | null })._handle;
  if (handle?.reading === true) {
    handle.reading = false;
    handle.readStop?.();
  }
}

/**
 * The engine reads the socket's own descriptor: whatever closes the handle (destroy, reset, the
 * sweep, stop) releases it there first, so that the engine never reads a number the kernel gives
 * to the next connection. Own properties in front of the handle's methods, for this handle only.
 */
function releaseBeforeClose(handle: StreamHandle, release: () => void): void {
  const methods = handle as unknown as Record<'close' | 'reset', ((...args: unknown[]) => unknown) | undefined>;
  for (const name of ['close', 'reset'] as const) {
    const original = methods[name];
    if (typeof original !== 'function') continue;
    methods[name] = function (this: unknown, ...args: unknown[]): unknown {
      release();
      return original.apply(this, args);
    };
  }
}

/** The answers gathered so far followed by `last`, as one buffer. */
function joined(answers: Buffer | Buffer[] | undefined, last: Buffer): Buffer {
  if (answers === undefined) return last;
  if (Array.isArray(answers)) return Buffer.concat(last.length === 0 ? answers : [...answers, last]);
  return last.length === 0 ? answers : Buffer.concat([answers, last]);
}

/** Writes the last answer and closes the lingering way (lingering-close.ts), so that the client does not lose it. */
function closeLingering(socket: net.Socket, last: Buffer): void {
  socket.end(last);
  lingerAfterEnd(socket);
}

/**
 * One connection refused here: all its reads need, in one object its handle leads to (the reader of
 * all refused connections is one function: stream-handle.ts), not in closures of its own.
 */
class RefusedConnection implements HandleReader, EngineConnection {
  /** Epoch ms: the deadline of an idle connection, or of a request head that is too slow. */
  at: number;
  /** The source the connection is refused for (its rate-limit key). */
  readonly key: string;
  /** The source is the socket peer (not a client a PROXY header names): the kernel may drop it. */
  readonly peer: boolean;
  /** Its handle, read from and written to directly (stream-handle.ts), when Node allows it. */
  handle: StreamHandle | undefined;
  /** Read into the shared buffer (not 'data' events). */
  sharedBuffer = false;
  /** socket.write was used: its Writable may hold bytes that a direct write would pass. */
  streamWrites = false;
  private readonly refusals: EarlyRefusals;
  private readonly host: EarlyRefusalHost;
  private readonly heads: HeadScanner;
  private readonly readBuffer: Buffer;
  private readonly socket: net.Socket;
  private buffered: Buffer = EMPTY;
  private partialSince = 0;
  private last: RateEpisode;
  /** The limiter `last` came from (the lookups after the first one go without a search: refuseBlocked's `known`). */
  private lastFrom: RateLimiter | undefined;
  private released = false;
  /** The keep-alive answer last given here (`response`'s `kept`). */
  private answer: PrebuiltRefusal | undefined;
  /** The last head answered here was a HEAD request's (answered without the body). */
  private lastHeadOnly = false;
  /** Offered to the native engine once (refusal-engine.ts); its id there while it serves the connection, else -1. */
  private engineOffered = false;
  private engine: RefusalEngine | undefined;
  private engineId = -1;

  constructor(
    refusals: EarlyRefusals,
    shared: { host: EarlyRefusalHost; heads: HeadScanner; readBuffer: Buffer },
    socket: net.Socket,
    key: string,
    peer: boolean,
    episode: RateEpisode,
  ) {
    this.refusals = refusals;
    this.host = shared.host;
    this.heads = shared.heads;
    this.readBuffer = shared.readBuffer;
    this.socket = socket;
    this.key = key;
    this.peer = peer;
    this.last = episode;
    this.at = Date.now() + shared.host.keepAliveTimeoutMs;
  }

  onRead(bytes: number): boolean {
    return this.onData(this.readBuffer.subarray(0, bytes));
  }

  /** Handles what arrived; false: stop reading until the client reads what we wrote. */
  onData(chunk: Buffer): boolean {
    if (this.released) return true;
    const host = this.host;
    const buffer = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    this.buffered = EMPTY;
    const now = Date.now();
    let from = 0;
    // The answers to the heads of one read go out in one write (a writev of one buffer costs more).
    let answers: Buffer | Buffer[] | undefined;
    for (;;) {
      const scan = this.heads.next(buffer, from);
      if (scan.kind === 'incomplete') {
        if (scan.start < buffer.length) {
          // A copy: `chunk` may be the shared read buffer, which the next read overwrites.
          this.buffered = Buffer.from(buffer.subarray(scan.start));
          if (this.partialSince === 0) {
            this.partialSince = now;
            this.at = now + host.headersTimeoutMs;
          }
        } else {
          this.partialSince = 0;
          this.at = now + host.keepAliveTimeoutMs;
        }
        break;
      }
      if (scan.kind === 'bad') {
        this.release();
        closeLingering(this.socket, joined(answers, BAD_REQUEST));
        return true;
      }
      const limiter = host.limiter();
      const blocked = limiter?.refuseBlocked(this.key, 1, limiter === this.lastFrom ? this.last : undefined);
      this.lastFrom = limiter;
      this.refusals.countRefused();
      this.partialSince = 0;
      if (blocked !== undefined) {
        this.last = blocked;
        if (this.peer) host.onBlockedRefusal?.(this.key, blocked.blockedUntil);
      }
      const close = scan.close || blocked === undefined;
      const answer = this.refusals.response(this.last, now, close, this.answer);
      const bytes = scan.head ? answer.bytes.subarray(0, answer.headLength) : answer.bytes;
      if (close) {
        this.release();
        closeLingering(this.socket, joined(answers, bytes));
        return true;
      }
      this.answer = answer;
      this.lastHeadOnly = scan.head;
      if (answers === undefined) answers = bytes;
      else if (Array.isArray(answers)) answers.push(bytes);
      else answers = [answers, bytes];
      from = scan.next;
    }
    if (answers === undefined) return true;
    // A client that sends but does not read must not grow our write buffer: stop reading until it does.
    if (!this.send(joined(answers, EMPTY))) return false;
    // Every head of this read answered, the last one kept alive: its repeats can go to the engine.
    if (!this.engineOffered && this.buffered.length === 0) this.offerToEngine();
    return true;
  }

  /**
   * Hands the connection to the native engine (refusal-engine.ts), which answers the repeats of the
   * head just answered without reading them through Node. Only a plain TCP socket read from its
   * handle, with nothing waiting in its Writable; else (or when the engine is not there) it stays here.
   */
  private offerToEngine(): void {
    this.engineOffered = true;
    const engine = refusalEngine();
    const handle = this.handle;
    const fd = (handle as { fd?: unknown } | undefined)?.fd;
    if (engine === undefined || handle === undefined || typeof fd !== 'number' || fd < 0) return;
    // Its close must be seen (releaseBeforeClose) for the engine to read the descriptor.
    if (typeof (handle as { close?: unknown }).close !== 'function') return;
    if ((this.socket as { encrypted?: boolean }).encrypted === true || this.streamWrites || this.socket.writableLength > 0) return;
    // The engine keeps a copy of the head per connection: a long one stays here (memory per connection bounded).
    const head = this.heads.lastHeadBytes();
    if (head.length > MAX_ENGINE_HEAD_BYTES) return;
    handle.reading = false;
    handle.readStop?.();
    const id = engine.adopt(fd, this.refusals.engineAnswer(this.last), head, this.lastHeadOnly, this);
    if (id === undefined) {
      resumeReading(this.socket);
      return;
    }
    this.engine = engine;
    this.engineId = id;
    releaseBeforeClose(handle, () => this.leaveEngine());
  }

  /** The engine no longer serves the connection (it closes, or is read here again). */
  leaveEngine(): void {
    if (this.engineId < 0) return;
    const id = this.engineId;
    this.engineId = -1;
    this.engine?.release(id);
  }

  /** The engine refused `count` more requests here: counted as the requests refused here are. */
  onEngineRefused(count: number): void {
    const host = this.host;
    this.at = Date.now() + host.keepAliveTimeoutMs;
    const limiter = host.limiter();
    const blocked = limiter?.refuseBlocked(this.key, count, limiter === this.lastFrom ? this.last : undefined);
    this.lastFrom = limiter;
    this.refusals.countRefused(count);
    if (blocked !== undefined) {
      this.last = blocked;
      if (this.peer) host.onBlockedRefusal?.(this.key, blocked.blockedUntil, count);
    } else if (this.engineId >= 0) {
      // The block is over for the limiter in force (lifted, or the proxy's limits changed): the next
      // request is read here, and gets the last 429 and the close.
      this.leaveEngine();
      resumeReading(this.socket);
    }
  }

  /** The engine gave the connection back: what it did not write goes first, then what it did not read. */
  onHandBack(kind: HandBackKind, input: Buffer | null, output: Buffer | null): void {
    this.engineId = -1;
    const socket = this.socket;
    if (kind !== 'bytes' || socket.destroyed) {
      socket.destroy();
      return;
    }
    if (output !== null) {
      this.streamWrites = true;
      socket.write(output);
    }
    if (input !== null && !this.onData(input)) return;
    if (this.released) return;
    if (socket.writableNeedDrain) socket.once('drain', () => this.resume());
    else this.resume();
  }

  /**
   * Writes one read's answers. true: keep reading; false: stop reading, started again once the
   * client has read enough. Straight to the handle when the socket's Writable holds nothing (order).
   */
  private send(bytes: Buffer): boolean {
    const socket = this.socket;
    if (!this.streamWrites || socket.writableLength === 0) {
      this.streamWrites = false;
      const written = writeToHandle(socket, bytes, () => this.resume(), this.handle);
      if (written !== undefined) {
        this.refusals.directWrites++;
        return written;
      }
    }
    this.streamWrites = true;
    socket.write(bytes);
    if (!socket.writableNeedDrain) return true;
    socket.once('drain', () => this.resume());
    return false;
  }

  /** Reading again once the client has read what we wrote. */
  private resume(): void {
    if (this.sharedBuffer) resumeReading(this.socket);
    else this.socket.resume();
  }

  /** No more answers on this connection: it is closed the lingering way, no longer swept. */
  private release(): void {
    this.released = true;
    this.refusals.untrack(this.socket);
  }
}
