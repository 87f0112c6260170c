/**
 * A hand-written HTTP/1.1 keep-alive client for one origin host: the hot path for requests without
 * a body (GET, HEAD, most DELETE and OPTIONS), which are the bulk of proxied traffic, and for those
 * whose body is already held whole in memory (the WAF buffers what it inspects: a form POST goes
 * out here in one write). Bodies that stream go through undici (see `OriginSet`): its streaming of
 * request bodies is what we would otherwise have to rewrite.
 *
 * Why by hand: undici costs about 8-15 us of CPU per request here on top of what a plain socket
 * costs (request objects, queue bookkeeping, a WASM parser called through JS callbacks, parsed
 * header objects we would only take apart again); with Node's HTTP server at ~13 us per request and
 * the syscalls of the second hop, that was the difference between ~0.4x and ~0.5x of nginx's
 * throughput (bench/http). This client does one write per request and parses the response in place.
 *
 * It is deliberately strict, because a keep-alive connection that loses track of where a response
 * ends would hand the next client someone else's response:
 * - one request at a time per connection (no pipelining);
 * - the response must parse cleanly: status line, headers without obs-fold, a single Content-Length,
 *   or Transfer-Encoding ending in chunked, never both; anything else is a bad response (502) and
 *   the connection is destroyed;
 * - a connection is reused only when its response ended exactly at the end of what the origin sent,
 *   with no Connection: close, on HTTP/1.1; otherwise it is closed.
 *
 * The handler interface is undici's native one (onConnect, onHeaders, onData, onComplete, onError),
 * so the same exchange object drives both clients.
 */
// Imported: on globalThis, Buffer, performance and process are accessors, a slow lookup on every use in the hot path.
import { Buffer } from 'node:buffer';
import type net from 'node:net';
import type tls from 'node:tls';
import type { ScopedOriginGuard } from '../../../net/origin-guard.ts';
import { writeLatin1ToHandle } from '../stream-handle.ts';
import { emptyResponseHead, parseResponseHead, type ResponseHead } from './response-head.ts';

export interface OriginHandler {
  onConnect(abort: (err?: Error) => void): void;
  /**
   * `rawHeaders`: a new list for each response, the handler's to keep or change; every name a token
   * (response-head.ts). Return false to pause the response until `resume` is called.
   */
  onHeaders(statusCode: number, rawHeaders: string[], resume: () => void): boolean;
  /** Return false to pause. */
  onData(chunk: Buffer): boolean;
  onComplete(trailers: null): void;
  onError(err: Error): void;
}

export interface OriginClientOptions {
  address: string;
  port: number;
  /** TLS towards the origin; undefined = plain TCP. */
  tls: tls.ConnectionOptions | undefined;
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnections: number;
  maxHeaderSize: number;
  /** Called with each error raised while opening a connection (TCP, TLS, certificate, timeout, origin policy). */
  onConnectFailure: (err: Error) => void;
  /** Opens the connections: the origin policy checks (and pins) the address of each. */
  guard: ScopedOriginGuard;
}

export class OriginError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }
}

/** The origin sent something that is not a well-formed HTTP/1.1 response. */
export const BAD_RESPONSE = 'TPS_ORIGIN_BAD_RESPONSE';
/** The connection closed (or reset) before the response was complete. */
export const CLOSED = 'TPS_ORIGIN_CLOSED';
export const HEADERS_TIMEOUT = 'TPS_ORIGIN_HEADERS_TIMEOUT';
export const BODY_TIMEOUT = 'TPS_ORIGIN_BODY_TIMEOUT';
export const CONNECT_TIMEOUT = 'TPS_ORIGIN_CONNECT_TIMEOUT';

const CRLF_CRLF = Buffer.from('\r\n\r\n');
/** Bytes of a response decoded to look for the end of its head at once; a longer head is found in the Buffer. */
const HEAD_WINDOW = 2048;

/**
 * Where plain TCP connections read into (`net.connect`'s `onread`): one buffer for all of them,
 * since each read is parsed before the next one can happen. It spares Node's stream machinery per
 * read (a new Buffer, `push`, a 'data' event); the price is that nothing may keep a view of it past
 * the read: body chunks handed on are copies, and bytes left unparsed are copied out.
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);
const EMPTY = Buffer.alloc(0);

interface Pending {
  method: string;
  head: string;
  /** Sent right after the head, in the same write. */
  body: Buffer | undefined;
  servername: string | undefined;
  handler: OriginHandler;
}

export class OriginClient {
  private readonly options: OriginClientOptions;
  /** Idle connections by SNI name ('' for none): a TLS connection serves only its own name. */
  private readonly idle = new Map<string, Connection[]>();
  private readonly queue: Pending[] = [];
  private connections = 0;
  private sweeper: NodeJS.Timeout | undefined;
  private closing = false;
  private readonly all = new Set<Connection>();

  constructor(options: OriginClientOptions) {
    this.options = options;
  }

  /**
   * Sends `method path` with `headers` (flat) and `body` if any, and reports to `handler`.
   * `servername` is the SNI name for a TLS origin (undefined: none, the certificate is checked
   * against the address). With a body, its Content-Length is ours: the client's framing (chunked,
   * HTTP/2 DATA frames, a Content-Length) ended when the body was read whole.
   */
  request(
    method: string,
    path: string,
    headers: readonly string[],
    servername: string | undefined,
    handler: OriginHandler,
    body?: Buffer,
  ): void {
    let head = `${method} ${path} HTTP/1.1\r\n`;
    // Names and values come from Node's parsers (which refuse CR, LF and NUL) or from our own code.
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const name = headers[i]!;
      if (body !== undefined && name.length === 14 && name.toLowerCase() === 'content-length') continue;
      head += `${name}: ${headers[i + 1]}\r\n`;
    }
    head += body === undefined ? '\r\n' : `content-length: ${body.length}\r\n\r\n`;
    const pending: Pending = { method, head, body, servername, handler };
    if (this.closing) return handler.onError(new OriginError(CLOSED, 'origin client closed'));
    const connection = this.takeIdle(servername ?? '');
    if (connection !== undefined) return connection.send(pending);
    if (this.connections >= this.options.maxConnections) {
      // All connections are taken; an idle one for another SNI name makes room for this one.
      const victim = this.anyIdle();
      if (victim !== undefined) victim.destroy();
    }
    if (this.connections < this.options.maxConnections) return this.open(pending);
    this.queue.push(pending);
  }

  /** Stops taking requests, closes idle connections, lets busy ones finish for `graceMs`, then cuts them. */
  async close(graceMs: number): Promise<void> {
    this.closing = true;
    for (const pending of this.queue.splice(0)) pending.handler.onError(new OriginError(CLOSED, 'origin client closed'));
    const idle = [...this.idle.values()].flat();
    this.idle.clear();
    for (const c of idle) c.destroy();
    const deadline = Date.now() + graceMs;
    while (this.all.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const c of this.all) c.destroy(new OriginError(CLOSED, 'origin client closed'));
    this.stopSweeper();
  }

  /** Open connections (for tests and metrics). */
  get size(): number {
    return this.connections;
  }

  private takeIdle(name: string): Connection | undefined {
    const list = this.idle.get(name);
    if (list === undefined) return undefined;
    // Most recently used first: fewer connections stay warm, and the warm ones are least likely stale.
    const connection = list.pop();
    if (list.length === 0) this.idle.delete(name);
    return connection;
  }

  private anyIdle(): Connection | undefined {
    for (const [name, list] of this.idle) {
      const connection = list.shift();
      if (list.length === 0) this.idle.delete(name);
      if (connection !== undefined) return connection;
    }
    return undefined;
  }

  private open(pending: Pending): void {
    this.connections++;
    const connection = new Connection(this, this.options, pending.servername);
    this.all.add(connection);
    connection.connect(pending);
    this.startSweeper();
  }

  /** A connection finished a response and may serve again. */
  released(connection: Connection): void {
    if (this.closing) return connection.destroy();
    const next = this.nextFor(connection.servername);
    if (next !== undefined) return connection.send(next);
    const name = connection.servername ?? '';
    let list = this.idle.get(name);
    if (list === undefined) this.idle.set(name, (list = []));
    list.push(connection);
  }

  /** A connection is gone (closed, failed or destroyed). */
  gone(connection: Connection, wasIdle: boolean): void {
    if (!this.all.delete(connection)) return;
    this.connections--;
    if (wasIdle) {
      const name = connection.servername ?? '';
      const list = this.idle.get(name);
      const at = list?.indexOf(connection) ?? -1;
      if (list !== undefined && at !== -1) {
        list.splice(at, 1);
        if (list.length === 0) this.idle.delete(name);
      }
    }
    // A request waiting for a free connection gets a new one.
    const next = this.queue.shift();
    if (next !== undefined && !this.closing) this.open(next);
    if (this.connections === 0) this.stopSweeper();
  }

  private nextFor(servername: string | undefined): Pending | undefined {
    if (this.queue.length === 0) return undefined;
    const index = this.queue.findIndex((p) => p.servername === servername);
    if (index === -1) return undefined;
    return this.queue.splice(index, 1)[0];
  }

  private startSweeper(): void {
    if (this.sweeper !== undefined) return;
    const o = this.options;
    // One timer per host instead of one per request: deadlines are numbers, checked a few times per
    // shortest timeout (so a timeout fires late by at most a quarter of itself, or 250 ms).
    const every = Math.max(10, Math.min(250, Math.floor(Math.min(o.headersTimeoutMs, o.bodyTimeoutMs, o.keepAliveTimeoutMs) / 4)));
    this.sweeper = setInterval(() => {
      const now = Date.now();
      for (const c of this.all) c.checkDeadline(now);
    }, every);
    this.sweeper.unref();
  }

  private stopSweeper(): void {
    if (this.sweeper === undefined) return;
    clearInterval(this.sweeper);
    this.sweeper = undefined;
  }
}

const S = {
  connecting: 0,
  idle: 1,
  head: 2,
  length: 3,
  chunkSize: 4,
  chunkData: 5,
  chunkEnd: 6,
  trailers: 7,
  untilClose: 8,
  closed: 9,
} as const;
type State = (typeof S)[keyof typeof S];

class Connection {
  readonly servername: string | undefined;
  private readonly client: OriginClient;
  private readonly options: OriginClientOptions;
  private socket: net.Socket | undefined = undefined;
  private state: State = S.connecting;
  private pending: Pending | undefined = undefined;
  /** Bytes received and not yet parsed. */
  private buffer: Buffer = EMPTY;
  private remaining = 0;
  private reusable = true;
  private paused = false;
  /** Date.now() past which the current phase has waited too long; 0 = none. */
  private deadline = 0;
  private deadlineCode = HEADERS_TIMEOUT;
  /**
   * Date.now() when the bytes being parsed arrived (or parsing resumed): the deadlines set while
   * parsing them count from it, one clock read per read rather than one per deadline.
   */
  private parsedAt = 0;
  private keepAliveMs: number;
  /** The last response head read (one record per connection, refilled by each head). */
  private readonly head: ResponseHead = emptyResponseHead();
  /** The current request's resume function (given to its handler; inert once the request is over). */
  private resume: () => void = () => {};

  constructor(client: OriginClient, options: OriginClientOptions, servername: string | undefined) {
    this.client = client;
    this.options = options;
    this.servername = servername;
    this.keepAliveMs = options.keepAliveTimeoutMs;
  }

  connect(first: Pending): void {
    const o = this.options;
    this.pending = first;
    this.deadline = Date.now() + o.connectTimeoutMs;
    this.deadlineCode = CONNECT_TIMEOUT;
    const socket =
      o.tls === undefined
        ? o.guard.connect({ host: o.address, port: o.port, noDelay: true, onread: { buffer: READ_BUFFER, callback: this.onRead } })
        : o.guard.connectTls({
            ...o.tls,
            host: o.address,
            port: o.port,
            ...(this.servername !== undefined ? { servername: this.servername } : {}),
            ALPNProtocols: ['http/1.1'],
          });
    this.socket = socket;
    if (o.tls !== undefined) socket.setNoDelay(true);
    socket.on(o.tls === undefined ? 'connect' : 'secureConnect', () => {
      if (this.state !== S.connecting) return;
      const pending = this.pending!;
      this.pending = undefined;
      this.send(pending);
    });
    // With `onread` (plain TCP) Node emits no 'data'.
    if (o.tls !== undefined) socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('end', () => this.onEnd());
    socket.on('error', (err: Error) => this.fail(err, false));
    socket.on('close', () => {
      // A read-until-close body that ended cleanly completes when its paused handler resumes.
      if (this.state === S.untilClose && socket.readableEnded && this.pending !== undefined) return;
      this.fail(new OriginError(CLOSED, 'origin closed the connection'), false);
    });
  }

  send(pending: Pending): void {
    this.pending = pending;
    this.state = S.head;
    this.deadline = Date.now() + this.options.headersTimeoutMs;
    this.deadlineCode = HEADERS_TIMEOUT;
    let written = false;
    // Per request, so that a late call from a finished exchange cannot touch the next one.
    this.resume = () => {
      if (this.pending !== pending || !this.paused) return;
      this.paused = false;
      this.parsedAt = Date.now();
      this.deadline = this.parsedAt + this.options.bodyTimeoutMs;
      this.deadlineCode = BODY_TIMEOUT;
      this.socket?.resume();
      this.parse();
    };
    const abort = (err?: Error): void => {
      if (this.pending !== pending) return;
      const reason = err ?? new OriginError('TPS_ABORTED', 'request aborted');
      if (written) return this.fail(reason, true);
      // Aborted before a byte left (the client went away while the request waited): the connection
      // is as good as before and serves the next request.
      this.pending = undefined;
      this.state = S.idle;
      this.deadline = Date.now() + Math.max(0, this.keepAliveMs);
      this.deadlineCode = CLOSED;
      pending.handler.onError(reason);
      this.client.released(this);
    };
    pending.handler.onConnect(abort);
    if (this.pending !== pending) return;
    written = true;
    const socket = this.socket!;
    if (pending.body === undefined) {
      // Straight to the handle when nothing is queued before it (plain TCP): no Writable layer per request.
      if (this.options.tls === undefined && writeLatin1ToHandle(socket, pending.head) !== undefined) return;
      socket.write(pending.head, 'latin1');
      return;
    }
    // One writev for head and body.
    socket.cork();
    socket.write(pending.head, 'latin1');
    socket.write(pending.body);
    socket.uncork();
  }

  checkDeadline(now: number): void {
    if (this.deadline !== 0 && now > this.deadline) {
      const code = this.deadlineCode;
      if (this.state === S.idle) return this.destroy();
      this.fail(new OriginError(code, `origin ${code === CONNECT_TIMEOUT ? 'connect' : 'response'} timed out`), false);
    }
  }

  destroy(err?: Error): void {
    if (this.state === S.closed) return;
    if (this.pending !== undefined) return this.fail(err ?? new OriginError(CLOSED, 'connection destroyed'), true);
    const wasIdle = this.state === S.idle;
    this.state = S.closed;
    this.socket?.destroy();
    this.client.gone(this, wasIdle);
  }

  /** `onread`'s callback: `READ_BUFFER` holds `length` new bytes, to be parsed or copied out before returning. */
  private readonly onRead = (length: number): boolean => {
    this.onData(READ_BUFFER.subarray(0, length));
    if (this.buffer.length > 0 && this.buffer.buffer === READ_BUFFER.buffer) this.buffer = Buffer.from(this.buffer);
    // Pausing goes through `socket.pause()`, which `onread` sockets honour.
    return true;
  };

  private onData(chunk: Buffer): void {
    if (this.state === S.idle || this.state === S.connecting) {
      // Bytes nobody asked for: the connection cannot be trusted to frame the next response.
      return this.destroy();
    }
    if (this.state === S.closed) return;
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    this.parsedAt = Date.now();
    if (this.state !== S.head) this.deadline = this.parsedAt + this.options.bodyTimeoutMs;
    if (!this.paused) this.parse();
  }

  private onEnd(): void {
    this.parsedAt = Date.now();
    if (this.state === S.untilClose && !this.paused) {
      this.reusable = false;
      return this.complete();
    }
    if (this.state === S.untilClose) {
      // Paused: finish once the handler resumes and the buffer is drained.
      this.reusable = false;
      return;
    }
    this.fail(new OriginError(CLOSED, 'origin closed the connection'), false);
  }

  /** Runs the response state machine over `buffer` until it needs more bytes, pauses or completes. */
  private parse(): void {
    while (!this.paused && this.pending !== undefined) {
      const buffer = this.buffer;
      switch (this.state) {
        case S.head: {
          // The start of the bytes decoded once and searched as text (a head nearly always fits in
          // it): no native search over the Buffer, no second decoding of the head.
          const window = Math.min(buffer.length, HEAD_WINDOW);
          let text = buffer.toString('latin1', 0, window);
          let end = text.indexOf('\r\n\r\n');
          if (end === -1 && window < buffer.length) {
            // A CRLF CRLF that the window cuts starts at most 3 bytes before its end.
            end = buffer.indexOf(CRLF_CRLF, window - 3);
            if (end !== -1 && end <= this.options.maxHeaderSize) text = buffer.toString('latin1', 0, end + 4);
          }
          if (end === -1) {
            if (buffer.length > this.options.maxHeaderSize) return this.bad('response head too large');
            return;
          }
          if (end > this.options.maxHeaderSize) return this.bad('response head too large');
          this.buffer = buffer.subarray(end + 4);
          if (!this.onHead(text, end)) return;
          break;
        }
        case S.length: {
          if (this.remaining === 0) return this.complete();
          if (buffer.length === 0) return;
          const take = Math.min(buffer.length, this.remaining);
          const chunk = take === buffer.length ? buffer : buffer.subarray(0, take);
          this.buffer = take === buffer.length ? EMPTY : buffer.subarray(take);
          this.remaining -= take;
          const pending = this.pending;
          const more = this.deliver(chunk);
          // The whole body is delivered: the response is over even if the handler asked for a pause.
          if (this.remaining === 0 && this.pending === pending) return this.complete();
          if (!more) return;
          break;
        }
        case S.chunkSize: {
          const lineEnd = buffer.indexOf('\r\n');
          if (lineEnd === -1) {
            if (buffer.length > 1024) return this.bad('chunk size line too long');
            return;
          }
          const line = buffer.toString('latin1', 0, lineEnd);
          this.buffer = buffer.subarray(lineEnd + 2);
          const semicolon = line.indexOf(';');
          const digits = (semicolon === -1 ? line : line.slice(0, semicolon)).trimEnd();
          if (!/^[0-9A-Fa-f]{1,12}$/.test(digits)) return this.bad('bad chunk size');
          this.remaining = parseInt(digits, 16);
          this.state = this.remaining === 0 ? S.trailers : S.chunkData;
          break;
        }
        case S.chunkData: {
          if (buffer.length === 0) return;
          const take = Math.min(buffer.length, this.remaining);
          const chunk = take === buffer.length ? buffer : buffer.subarray(0, take);
          this.buffer = take === buffer.length ? EMPTY : buffer.subarray(take);
          this.remaining -= take;
          if (this.remaining === 0) this.state = S.chunkEnd;
          if (!this.deliver(chunk)) return;
          break;
        }
        case S.chunkEnd: {
          if (buffer.length < 2) return;
          if (buffer[0] !== 13 || buffer[1] !== 10) return this.bad('chunk not followed by CRLF');
          this.buffer = buffer.subarray(2);
          this.state = S.chunkSize;
          break;
        }
        case S.trailers: {
          // Trailer fields are dropped (Node's client side would need them announced); the empty line ends the message.
          const lineEnd = buffer.indexOf('\r\n');
          if (lineEnd === -1) {
            if (buffer.length > this.options.maxHeaderSize) return this.bad('trailers too large');
            return;
          }
          this.buffer = buffer.subarray(lineEnd + 2);
          if (lineEnd === 0) return this.complete();
          break;
        }
        case S.untilClose: {
          if (buffer.length === 0) {
            if (this.socket?.readableEnded) {
              this.reusable = false;
              return this.complete();
            }
            return;
          }
          this.buffer = EMPTY;
          if (!this.deliver(buffer)) return;
          break;
        }
        default:
          return;
      }
    }
  }

  /** Reads the response head `text[0, size)` (its CRLF CRLF follows); false when parsing must stop (error, or paused). */
  private onHead(text: string, size: number): boolean {
    const head = this.head;
    const refused = parseResponseHead(text, size, head);
    if (refused !== undefined) return this.badHead(refused);
    if (head.keepAliveTimeoutSeconds >= 0)
      this.keepAliveMs = Math.min(this.options.keepAliveTimeoutMs, head.keepAliveTimeoutSeconds * 1000 - 1000);
    const code = head.status;
    // Interim response (100, 102, 103; 101 is refused): the final one follows on the same connection.
    if (code < 200) return true;
    const { chunked, transferEncoding, close } = head;
    const length = head.contentLength;
    if (close) this.reusable = false;
    const pending = this.pending!;
    const bodiless = pending.method === 'HEAD' || code === 204 || code === 304;
    if (bodiless) {
      this.state = S.length;
      this.remaining = 0;
    } else if (chunked) {
      this.state = S.chunkSize;
    } else if (transferEncoding) {
      // A transfer coding other than chunked last: the body ends with the connection (RFC 9112 6.3).
      this.state = S.untilClose;
      this.reusable = false;
    } else if (length !== -1) {
      this.state = S.length;
      this.remaining = length;
    } else {
      this.state = S.untilClose;
      this.reusable = false;
    }
    this.deadline = this.parsedAt + this.options.bodyTimeoutMs;
    this.deadlineCode = BODY_TIMEOUT;
    const go = pending.handler.onHeaders(code, head.headers, this.resume);
    if (this.pending !== pending) return false; // aborted from the handler
    if (!go) {
      // Also for a bodiless response: the handler may still be deciding what to send (response WAF).
      this.pauseSocket();
      return false;
    }
    return true;
  }

  /** Hands body bytes to the handler; false when it asked to pause (or the exchange ended). */
  private deliver(chunk: Buffer): boolean {
    const pending = this.pending!;
    // The handler may keep the chunk (a write queued on the client's socket, a held response).
    const more = pending.handler.onData(chunk.buffer === READ_BUFFER.buffer ? Buffer.from(chunk) : chunk);
    if (this.pending !== pending) return false;
    if (!more) {
      this.pauseSocket();
      return false;
    }
    return true;
  }

  private pauseSocket(): void {
    this.paused = true;
    // A paused response may wait on a slow client as long as it needs: only the client's own timeouts apply.
    this.deadline = 0;
    this.socket?.pause();
  }

  private complete(): void {
    const pending = this.pending;
    if (pending === undefined) return;
    this.pending = undefined;
    this.deadline = 0;
    const clean =
      this.reusable &&
      this.keepAliveMs > 0 &&
      this.buffer.length === 0 &&
      this.socket !== undefined &&
      !this.socket.destroyed &&
      !this.socket.readableEnded;
    this.buffer = EMPTY;
    if (this.paused) {
      this.paused = false;
      this.socket?.resume();
    }
    if (clean) {
      this.state = S.idle;
      this.deadline = this.parsedAt + Math.max(0, this.keepAliveMs);
      this.deadlineCode = CLOSED;
    } else {
      this.state = S.closed;
      this.socket?.destroy();
      this.client.gone(this, false);
    }
    pending.handler.onComplete(null);
    if (clean && this.state === S.idle) this.client.released(this);
  }

  private bad(why: string): void {
    this.fail(new OriginError(BAD_RESPONSE, `bad response from origin: ${why}`), false);
  }

  /** `bad`, for the head parser: false, which it returns at once. */
  private badHead(why: string): false {
    this.bad(why);
    return false;
  }

  /** Ends the connection and reports `err` to the request in flight, if any. */
  private fail(err: Error, aborted: boolean): void {
    if (this.state === S.closed) return;
    const wasIdle = this.state === S.idle;
    const connecting = this.state === S.connecting;
    this.state = S.closed;
    this.socket?.destroy();
    const pending = this.pending;
    this.pending = undefined;
    this.client.gone(this, wasIdle);
    if (connecting && !aborted) this.options.onConnectFailure(err);
    if (pending !== undefined) pending.handler.onError(err);
  }
}
