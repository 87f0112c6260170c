/**
 * The handle front end: HTTP/1.1 connections of a plain listener read on their handle, each
 * simple request head parsed by Node's own llhttp and served without `node:http`'s per-request
 * objects and streams (FrontRequest, FrontResponse), which are most of what node:http costs per
 * request (docs/benchmarks.md, bench/http BENCH_FLOOR).
 *
 * It serves only what it can serve exactly as node:http would, and hands everything else to
 * node:http, bytes untouched, from that head on (and for the rest of the connection):
 *
 * - a head is served here when it is complete, `GET` or `HEAD` with a target of printable ASCII,
 *   `HTTP/1.1`, within `maxHeaderSize`, llhttp (configured as node:http configures it) parses it
 *   without an error, and among the fields llhttp read there is a Host and none of Content-Length,
 *   Transfer-Encoding, Upgrade or Expect: a request without a body, which cannot be smuggled.
 *   llhttp, strict, refuses a bare CR or LF anywhere in a head (simple-head.test.ts checks these
 *   decisions against the regular expressions over the head's text they replaced);
 * - anything else (a body, an upgrade, HTTP/1.0, another method, a malformed head, a head that is
 *   not complete one checking interval after it began, a source the rate limit has blocked) goes to
 *   node:http, which answers it (and its errors) as it always did; so there is one parser's
 *   meaning, llhttp's, and node:http's answers to what it refuses;
 * - requests on a connection are answered in order, one at a time: pipelined heads wait as bytes.
 *
 * Deadlines, checked every `connectionsCheckingIntervalMs` (as node:http checks its own): a new
 * connection that sends nothing gets node:http's 408 after `headersTimeoutMs` (counted as its
 * REQUEST_TIMEOUT), an idle one between requests is closed after `keepAliveTimeoutMs`, one whose
 * request waits without any traffic after `idleTimeoutMs` (node:http's socket timeout). The reads and writes go to the handle
 * without the socket's stream layer (stream-handle.ts); the socket stays (its close, errors and
 * FIN, and the listener's count of it).
 */
// Imported: on globalThis, Buffer, performance and process are accessors, a slow lookup on every use in the hot path.
import { Buffer } from 'node:buffer';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import type { Socket } from 'node:net';
import { isNamed } from '../header-name.ts';
import { type HandleReader, readFromHandle, writeToHandle } from '../stream-handle.ts';
import { FrontRequest } from './front-request.ts';
import { FrontResponse, type ResponseConnection } from './front-response.ts';
import { type LlhttpParser, NODE_HTTP_COMMON } from './node-http-common.ts';

/** Whether plain HTTP/1.1 connections go to the handle front end (on by default where Node has what it needs; the setting and tests turn it off). */
let enabled = true;

/** `TPS_HTTP1_FRONT_END`: `handles` (default) or `node` (every connection to node:http). */
export function useHandleFrontEnd(on: boolean): void {
  enabled = on;
}

export function handleFrontEndAvailable(): boolean {
  return enabled && NODE_HTTP_COMMON !== undefined;
}

export interface FrontEndHost {
  readonly maxHeaderSize: number;
  readonly keepAliveTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly connectionsCheckingIntervalMs: number;
  /** Serves a request: the phases, then the upstream (HttpProxy's request handler). */
  serve(req: FrontRequest, res: FrontResponse): void;
  /** A new connection sent nothing for `headersTimeoutMs`: answered and counted as node:http's header timeout is (408). */
  onHeadersTimeout(socket: Socket): void;
}

/** Per connection, from the proxy: when a head goes to node:http, and how. */
export interface ConnectionHandOff {
  /** Checked before each head is served here: true sends it to node:http (a source the rate limit blocked since). */
  beforeHead(): boolean;
  /** node:http takes the connection from here on; `pending` are the bytes it is to read first. */
  handOff(pending: Buffer): void;
}

const CR = 13;
const LF = 10;
const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
/** Bytes of a read decoded to look for the end of a head at once; a longer head is found in the Buffer. */
const HEAD_WINDOW = 2048;
const SIMPLE_REQUEST_LINE = /^(?:GET|HEAD) [\x21-\x7e]+ HTTP\/1\.1(?:\r\n|$)/;
/** Only for the start of a head not complete yet (which llhttp has not read). */
const BARE_CR_OR_LF = /\r(?!\n)|(?<!\r)\n/;
/** Heads with more fields go to node:http (whose header object keeps at most 1,000 fields' worth); real clients send a few dozen. */
const MAX_HEADER_FIELDS = 100;
/** Pipelined bytes kept while a request is under way; past this, reading waits. */
const MAX_PENDING_BYTES = 64 * 1024;
const EMPTY = Buffer.alloc(0);

/** Whether `text`, from the start of a head on, starts with a request line this front end may serve (its fields are llhttp's to read). */
export function isSimpleRequestLine(text: string): boolean {
  return SIMPLE_REQUEST_LINE.test(text);
}

/**
 * Whether the fields llhttp read from a head (flat names and values) make a request this front end
 * serves: a Host, and none of the fields that make a request more than a head (a body, an upgrade,
 * an expectation: node:http's). The names as llhttp read them (tokens, nothing around them): one
 * short loop instead of regular expressions over the whole head.
 */
export function isSimpleFieldList(fields: readonly string[]): boolean {
  let host = false;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i]!;
    switch (name.length) {
      case 4:
        if (isNamed(name, 'host')) host = true;
        break;
      case 6:
        if (isNamed(name, 'expect')) return false;
        break;
      case 7:
        if (isNamed(name, 'upgrade')) return false;
        break;
      case 14:
        if (isNamed(name, 'content-length')) return false;
        break;
      case 17:
        if (isNamed(name, 'transfer-encoding')) return false;
        break;
    }
  }
  return host;
}

/** Whether the start of a head (no CRLF CRLF yet) can still become one this front end serves: else node:http takes it now. */
function mayBecomeSimple(partial: string): boolean {
  // A CR last may be the start of its CRLF.
  const text = partial.endsWith('\r') ? partial.slice(0, -1) : partial;
  if (BARE_CR_OR_LF.test(text)) return false;
  const lineEnd = text.indexOf('\r\n');
  return lineEnd === -1 || SIMPLE_REQUEST_LINE.test(text.slice(0, lineEnd));
}

export class HandleFrontEnd {
  private readonly host: FrontEndHost;
  /** One buffer for every connection's reads: a read is handled, or its rest copied out, before the next. */
  private readonly readBuffer = Buffer.allocUnsafe(64 * 1024);
  private readonly connections = new Set<FrontConnection>();
  private sweeper: NodeJS.Timeout | undefined = undefined;
  closing = false;

  constructor(host: FrontEndHost) {
    this.host = host;
  }

  /**
   * Takes an admitted connection (not read yet) if it can: false leaves it to node:http untouched.
   * `handOff` is called at most once, when node:http is to take over.
   */
  take(socket: Socket, handOff: ConnectionHandOff): boolean {
    if (!handleFrontEndAvailable() || this.closing) return false;
    if (socket.destroyed || socket.bytesRead !== 0 || socket.readableLength !== 0) return false;
    const connection = new FrontConnection(this, this.host, socket, handOff);
    if (readFromHandle(socket, this.readBuffer, connection) === undefined) return false;
    this.connections.add(connection);
    connection.start();
    this.sweeper ??= setInterval(
      () => this.sweep(),
      Math.max(50, Math.min(this.host.connectionsCheckingIntervalMs, this.host.keepAliveTimeoutMs / 2)),
    );
    this.sweeper.unref();
    return true;
  }

  get buffer(): Buffer {
    return this.readBuffer;
  }

  forget(connection: FrontConnection): void {
    this.connections.delete(connection);
    if (this.connections.size === 0 && this.sweeper !== undefined) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  /** Stops taking connections, closes the idle ones now and the others after their response. */
  close(): void {
    this.closing = true;
    for (const connection of [...this.connections]) connection.closeIfIdle();
  }

  private sweep(): void {
    const now = performance.now();
    for (const connection of [...this.connections]) connection.checkDeadlines(now);
  }
}

class FrontConnection implements ResponseConnection, HandleReader {
  readonly keepAliveSeconds: number;
  private readonly front: HandleFrontEnd;
  private readonly host: FrontEndHost;
  private readonly socket: Socket;
  private readonly handOffTo: ConnectionHandOff;
  private readonly parser: LlhttpParser;
  /** Bytes read and not served yet (the next heads), when a request is under way or a head is not complete. */
  private pending: Buffer = EMPTY;
  private response: FrontResponse | undefined = undefined;
  /** The responses whose writes libuv queued, oldest first (each told when its write is out). */
  private queuedWrites: FrontResponse[] | undefined = undefined;
  /** The request the parser just read (set by its callbacks during `execute`). */
  private parsed: FrontRequest | undefined = undefined;
  private parsedKeepAlive = false;
  /** When the heads being served were read (or taken from `pending`): their requests' start. */
  private headsReadAt = 0;
  private headerList: string[] = [];
  private urlParts = '';
  private handedOff = false;
  /** A request was served on this connection. */
  private served = false;
  private readingStopped = false;
  /** performance.now() of the last read or write, of the last response's end, of the first byte of an incomplete head (-1: none). */
  private lastActivity: number;
  private idleSince: number;
  private incompleteSince = -1;
  keepAlive = true;

  constructor(front: HandleFrontEnd, host: FrontEndHost, socket: Socket, handOff: ConnectionHandOff) {
    this.front = front;
    this.host = host;
    this.socket = socket;
    this.handOffTo = handOff;
    this.keepAliveSeconds = Math.floor(host.keepAliveTimeoutMs / 1000);
    this.lastActivity = this.idleSince = performance.now();
    const binding = NODE_HTTP_COMMON!;
    const Parser = binding.HTTPParser;
    const parser = new Parser();
    // As node:http initializes its own: the server's header size limit, nothing lenient.
    parser.initialize(Parser.REQUEST, {}, host.maxHeaderSize, Parser.kLenientNone);
    parser[Parser.kOnHeaders] = (headers: string[], url: string): void => {
      for (const item of headers) this.headerList.push(item);
      this.urlParts += url;
    };
    parser[Parser.kOnHeadersComplete] = (
      _versionMajor: number,
      _versionMinor: number,
      headers: string[] | undefined,
      method: number,
      url: string | undefined,
      _statusCode: number,
      _statusMessage: string,
      upgrade: boolean,
      shouldKeepAlive: boolean,
    ): number => {
      const list = headers === undefined ? this.headerList : this.headerList.length > 0 ? [...this.headerList, ...headers] : headers;
      const target = url === undefined ? this.urlParts : this.urlParts + url;
      // A new list only when this one was handed on or filled (most heads come whole, in `headers`).
      if (list === this.headerList || this.headerList.length > 0) this.headerList = [];
      this.urlParts = '';
      // An upgrade, more fields than node:http builds its header object from, a body: node:http's.
      if (upgrade || list.length > MAX_HEADER_FIELDS * 2 || !isSimpleFieldList(list)) return 0;
      this.parsed = new FrontRequest(binding.methods[method] ?? '', target, list, this.socket, this.headsReadAt);
      this.parsedKeepAlive = shouldKeepAlive;
      return 0;
    };
    parser[Parser.kOnBody] = (): void => {};
    parser[Parser.kOnMessageComplete] = (): void => {};
    this.parser = parser;
  }

  get gone(): boolean {
    return this.socket.destroyed;
  }

  get buffer(): Buffer {
    return this.front.buffer;
  }

  start(): void {
    const socket = this.socket;
    socket.on('end', this.onEnd);
    socket.on('close', this.onClose);
    // A reset or a failed write: 'close' follows, which is where the request hears of it (node:http listens alike).
    socket.on('error', this.onError);
    // Its reads come to onRead from now on; the socket must flow for the handle to be read.
    socket.resume();
  }

  /** A read of `bytes` into the shared buffer. */
  onRead(bytes: number): boolean {
    this.lastActivity = performance.now();
    const view = this.front.buffer.subarray(0, bytes);
    if (this.handedOff) return this.socket.push(Buffer.from(view));
    if (this.response !== undefined || this.pending.length > 0) {
      this.pending = this.pending.length === 0 ? Buffer.from(view) : Buffer.concat([this.pending, view]);
      if (this.response === undefined) this.serveHeads(this.pending, this.lastActivity);
      else if (this.pending.length > MAX_PENDING_BYTES) {
        this.readingStopped = true;
        return false;
      }
      return true;
    }
    this.serveHeads(view, this.lastActivity);
    return true;
  }

  write(bytes: Uint8Array, response: FrontResponse): boolean {
    this.lastActivity = performance.now();
    const written = writeToHandle(this.socket, bytes, this.onQueuedWriteDone);
    if (written === false) (this.queuedWrites ??= []).push(response);
    if (written !== undefined) return written;
    return this.socket.write(bytes, () => response.drained());
  }

  finished(_response: FrontResponse, close: boolean, justWritten: boolean): void {
    this.response = undefined;
    // Right after the response's own write (which read the clock), not later: the clock is not read again.
    this.idleSince = justWritten ? this.lastActivity : (this.lastActivity = performance.now());
    const socket = this.socket;
    if (close || !this.keepAlive || this.front.closing) {
      // node:http's way: the lingering close when a phase set it up (respond.ts), else end after the writes.
      if (!socket.destroyed) socket.destroySoon();
      return;
    }
    if (this.pending.length > 0) process.nextTick(() => this.servePending());
    else if (this.readingStopped) this.resumeReading();
  }

  destroy(error?: Error): void {
    this.socket.destroy(error);
  }

  closeIfIdle(): void {
    if (this.response === undefined && !this.handedOff) this.socket.destroy();
  }

  checkDeadlines(now: number): void {
    if (this.handedOff || this.socket.destroyed) return;
    if (this.response !== undefined) {
      if (now - this.lastActivity >= this.host.idleTimeoutMs) this.socket.destroy();
      return;
    }
    if (this.incompleteSince >= 0) {
      // A head still coming after a checking interval: node:http takes it, with its own deadlines from now on.
      if (now - this.incompleteSince >= this.host.connectionsCheckingIntervalMs) this.handOff(this.pending);
      return;
    }
    // A connection that has not sent a request yet has node:http's header timeout, one between requests the keep-alive timeout.
    if (!this.served) {
      if (now - this.idleSince >= this.host.headersTimeoutMs) this.host.onHeadersTimeout(this.socket);
    } else if (now - this.idleSince >= this.host.keepAliveTimeoutMs) this.socket.destroy();
  }

  private servePending(): void {
    if (this.handedOff || this.socket.destroyed || this.response !== undefined) return;
    const pending = this.pending;
    this.pending = EMPTY;
    this.serveHeads(pending, performance.now());
    if (this.readingStopped && this.pending.length <= MAX_PENDING_BYTES) this.resumeReading();
  }

  /** Serves the heads in `bytes`, there since `readAt` (performance.now()), one by one until one is under way; keeps (a copy of) the rest. */
  private serveHeads(bytes: Buffer, readAt: number): void {
    this.headsReadAt = readAt;
    let from = 0;
    while (from < bytes.length) {
      if (this.response !== undefined) break;
      const first = bytes[from];
      // Empty lines before a request line: node:http's business.
      if (first === CR || first === LF) return this.handOff(bytes.subarray(from));
      // The start of the bytes decoded once and searched as text (a head nearly always fits in it):
      // no native search over the Buffer, no second decoding of the head.
      const window = bytes.length - from < HEAD_WINDOW ? bytes.length : from + HEAD_WINDOW;
      const text = bytes.toString('latin1', from, window);
      const found = text.indexOf('\r\n\r\n');
      // A CRLF CRLF that the window cuts starts at most 3 bytes before its end.
      const end = found !== -1 ? from + found : window === bytes.length ? -1 : bytes.indexOf(HEAD_END, window - 3);
      if (end === -1) {
        if (
          bytes.length - from > this.host.maxHeaderSize ||
          !mayBecomeSimple(window === bytes.length ? text : bytes.toString('latin1', from))
        )
          return this.handOff(bytes.subarray(from));
        break;
      }
      // The request line is in the window when the head's end is.
      if (end - from > this.host.maxHeaderSize || !SIMPLE_REQUEST_LINE.test(found !== -1 ? text : bytes.toString('latin1', from, end)))
        return this.handOff(bytes.subarray(from));
      // Most reads are one head: the read's own view, not a new one. Undefined: llhttp refused it,
      // or its fields make it node:http's (the parser is not used again once node:http has the connection).
      const request = this.parse(from === 0 && end + 4 === bytes.length ? bytes : bytes.subarray(from, end + 4));
      if (request === undefined || this.handOffTo.beforeHead()) return this.handOff(bytes.subarray(from));
      from = end + 4;
      this.serve(request);
    }
    if (from === bytes.length) {
      this.pending = EMPTY;
      this.incompleteSince = -1;
      return;
    }
    const rest = from === 0 ? bytes : bytes.subarray(from);
    // The shared read buffer is reused by the next read: what is kept is copied.
    this.pending = rest.buffer === this.front.buffer.buffer ? Buffer.from(rest) : rest;
    if (this.response === undefined && this.incompleteSince < 0) this.incompleteSince = performance.now();
  }

  private parse(head: Buffer): FrontRequest | undefined {
    this.parsed = undefined;
    const result = this.parser.execute(head);
    const request = this.parsed;
    this.parsed = undefined;
    if (typeof result !== 'number' || result !== head.length) return undefined;
    return request;
  }

  private serve(request: FrontRequest): void {
    this.incompleteSince = -1;
    this.served = true;
    this.keepAlive = this.parsedKeepAlive && !this.front.closing;
    const response = new FrontResponse(this, request.method);
    this.response = response;
    this.host.serve(request, response);
  }

  /** node:http takes the connection from `bytes` on. */
  private handOff(bytes: Buffer): void {
    if (this.handedOff) return;
    this.handedOff = true;
    this.front.forget(this);
    const socket = this.socket;
    socket.off('end', this.onEnd);
    socket.off('close', this.onClose);
    socket.off('error', this.onError);
    const pending = bytes.length === 0 ? EMPTY : Buffer.from(bytes);
    this.pending = EMPTY;
    this.handOffTo.handOff(pending);
    if (this.readingStopped) this.resumeReading();
  }

  private resumeReading(): void {
    this.readingStopped = false;
    const handle = (this.socket as unknown as { _handle?: { reading?: boolean; readStart?: () => number } | null })._handle;
    if (handle === null || handle === undefined || handle.reading === true) return;
    handle.reading = true;
    handle.readStart?.();
  }

  /** libuv completes a handle's queued writes in order: the first one waiting is the one done. */
  private readonly onQueuedWriteDone = (): void => {
    this.queuedWrites?.shift()?.drained();
  };

  /** The client's FIN: as node:http (no half-open connections), the socket ends once what is written is out. */
  private readonly onEnd = (): void => {
    if (this.socket.writable) this.socket.end();
  };

  private readonly onError = (): void => {
    this.socket.destroy();
  };

  private readonly onClose = (): void => {
    this.front.forget(this);
    const response = this.response;
    this.response = undefined;
    response?.connectionClosed();
  };
}
