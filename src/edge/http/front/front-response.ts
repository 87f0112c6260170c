/**
 * The response to a request the handle front end serves (front-end.ts): what the phases and the
 * upstream do with Node's `ServerResponse` (`ClientResponse`), written as Node writes it, so that
 * a client sees the same bytes whichever front end answered:
 *
 * - the head is fixed at `writeHead` (Node's `_storeHeader`): the status line with Node's reason
 *   phrase, the headers in order (validated as Node validates them, the same errors thrown before
 *   anything is written), `Date` unless given, then `Connection: keep-alive` and `Keep-Alive:
 *   timeout=N` (or `Connection: close` when the request asked to close), then, without a
 *   Content-Length, `Transfer-Encoding: chunked` for a response that has a body;
 * - HEAD, 1xx, 204 and 304 responses have no body: writes are dropped, as Node drops them;
 * - the head leaves with the first write (the whole response in one write when `end` brings the
 *   body), to the socket's handle without the stream's layer (stream-handle.ts);
 * - 'close' is emitted on the next tick once the last byte is with the kernel, or when the client
 *   leaves first; 'drain' once a write the kernel did not take at once is out.
 */
// Imported: on globalThis, Buffer, performance and process are accessors, a slow lookup on every use in the hot path.
import { Buffer } from 'node:buffer';
import process from 'node:process';
import { STATUS_CODES } from 'node:http';
import type { ClientResponse } from '../ctx.ts';
import { isNamed } from '../header-name.ts';
import { currentHttpDate } from '../http-date.ts';
import { NODE_HTTP_COMMON } from './node-http-common.ts';

// Only built where the front end is available (NODE_HTTP_COMMON defined: front-end.ts checks).
const { _checkIsHttpToken: isHttpToken, _checkInvalidHeaderChar: hasInvalidHeaderChar } = NODE_HTTP_COMMON ?? {
  _checkIsHttpToken: () => false,
  _checkInvalidHeaderChar: () => true,
};

/** Node's `RE_CONN_CLOSE`: a Connection header that asks to close. */
const CONNECTION_CLOSE = /(?:^|\W)close(?:$|\W)/i;
/** Node's `chunkExpression`. */
const CHUNKED = /(?:^|\W)chunked(?:$|\W)/i;
const LAST_CHUNK = Buffer.from('0\r\n\r\n', 'latin1');
const EMPTY = Buffer.alloc(0);

/** What a response needs of its connection (front-end.ts). */
export interface ResponseConnection {
  /** The client asked to keep the connection (llhttp's `shouldKeepAlive`) and the front end is not closing. */
  readonly keepAlive: boolean;
  /** `Keep-Alive: timeout=` in seconds; 0: no Keep-Alive header. */
  readonly keepAliveSeconds: number;
  /** The socket is gone: nothing more can be written. */
  readonly gone: boolean;
  /** true: the kernel has the bytes; false: pending, the response's `drained` follows (or the socket closes). */
  write(bytes: Uint8Array, response: FrontResponse): boolean;
  /**
   * The response is over (its last byte is with the kernel); `close`: the connection ends after it.
   * `justWritten`: it ends with the `write` just made, which the kernel took at once.
   */
  finished(response: FrontResponse, close: boolean, justWritten: boolean): void;
  destroy(error?: Error): void;
}

function headerError(code: string, message: string): TypeError {
  return Object.assign(new TypeError(message), { code });
}

export class FrontResponse implements ClientResponse {
  headersSent = false;
  writableEnded = false;
  private destroyedByCaller = false;
  /** Head fixed by writeHead, not written yet. */
  private head: string | undefined = undefined;
  private chunked = false;
  private hasBody: boolean;
  /** The connection ends after this response. */
  private last = false;
  /** 'close' emitted, or scheduled. */
  private closed = false;
  /** The first 'close' listener (the proxy's, the only one as a rule), then any others. */
  private closeListener: (() => void) | undefined = undefined;
  private closeListeners: (() => void)[] | undefined = undefined;
  private drainListeners: (() => void)[] | undefined = undefined;
  private finishOnDrain = false;
  /** `send` handed bytes to the connection (read by `end`). */
  private wrote = false;
  private readonly connection: ResponseConnection;

  constructor(connection: ResponseConnection, method: string) {
    this.connection = connection;
    this.hasBody = method !== 'HEAD';
  }

  get destroyed(): boolean {
    return this.destroyedByCaller || this.connection.gone;
  }

  writeHead(statusCode: number, headers: readonly string[]): this {
    return this.storeHead(statusCode, headers, false);
  }

  /**
   * `writeHead` for headers whose names are tokens already (the origin client's reader checked
   * each against the same characters as node:http's check, response-head.ts): the values are
   * checked, the names not a second time.
   */
  writeHeadOfTokens(statusCode: number, headers: readonly string[]): this {
    return this.storeHead(statusCode, headers, true);
  }

  private storeHead(statusCode: number, headers: readonly string[], namesAreTokens: boolean): this {
    if (this.head !== undefined || this.headersSent)
      throw headerError('ERR_HTTP_HEADERS_SENT', 'Cannot write headers after they are sent to the client');
    if (!Number.isInteger(statusCode) || statusCode < 100 || statusCode > 999)
      throw Object.assign(new RangeError(`Invalid status code: ${statusCode}`), { code: 'ERR_HTTP_INVALID_STATUS_CODE' });
    if (statusCode === 204 || statusCode === 304 || statusCode < 200) this.hasBody = false;
    let head = `HTTP/1.1 ${statusCode} ${STATUS_CODES[statusCode] ?? 'unknown'}\r\n`;
    let connectionGiven = false;
    let lengthGiven = false;
    let encodingGiven = false;
    let dateGiven = false;
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i]!;
      const value = headers[i + 1];
      if (!namesAreTokens && (typeof name !== 'string' || name.length === 0 || !isHttpToken(name)))
        throw headerError('ERR_INVALID_HTTP_TOKEN', `Header name must be a valid HTTP token ["${String(name)}"]`);
      if (value === undefined) throw headerError('ERR_HTTP_INVALID_HEADER_VALUE', `Invalid value "undefined" for header "${name}"`);
      if (hasInvalidHeaderChar(value)) throw headerError('ERR_INVALID_CHAR', `Invalid character in header content ["${name}"]`);
      switch (name.length) {
        case 4:
          if (isNamed(name, 'date')) dateGiven = true;
          break;
        case 10:
          if (isNamed(name, 'connection')) {
            connectionGiven = true;
            if (CONNECTION_CLOSE.test(value)) this.last = true;
          }
          break;
        case 14:
          if (isNamed(name, 'content-length')) lengthGiven = true;
          break;
        case 17:
          if (isNamed(name, 'transfer-encoding')) {
            encodingGiven = true;
            // As Node: a given chunked coding is framed here.
            if (CHUNKED.test(value)) this.chunked = true;
          }
          break;
      }
      head += `${name}: ${value}\r\n`;
    }
    if (!dateGiven) head += `Date: ${currentHttpDate()}\r\n`;
    const connection = this.connection;
    if (!connectionGiven) {
      if (connection.keepAlive) {
        head += 'Connection: keep-alive\r\n';
        if (connection.keepAliveSeconds > 0) head += `Keep-Alive: timeout=${connection.keepAliveSeconds}\r\n`;
      } else {
        this.last = true;
        head += 'Connection: close\r\n';
      }
    }
    if (!lengthGiven && !encodingGiven && this.hasBody) {
      head += 'Transfer-Encoding: chunked\r\n';
      this.chunked = true;
    }
    this.head = `${head}\r\n`;
    return this;
  }

  write(chunk: Uint8Array): boolean {
    if (this.writableEnded) return false;
    // As Node's implicit head: a 200 when nobody wrote one.
    if (this.head === undefined && !this.headersSent) this.writeHead(200, []);
    return this.send(chunk, false);
  }

  end(data?: string | Uint8Array): this {
    if (this.writableEnded) return this;
    this.writableEnded = true;
    const body = data === undefined ? EMPTY : typeof data === 'string' ? Buffer.from(data) : data;
    if (this.head === undefined && !this.headersSent) this.writeHead(200, []);
    this.wrote = false;
    if (this.send(body, true)) this.finish(this.wrote);
    else this.finishOnDrain = true;
    return this;
  }

  destroy(error?: Error): this {
    if (this.destroyedByCaller) return this;
    this.destroyedByCaller = true;
    this.connection.destroy(error);
    return this;
  }

  on(_event: 'close', listener: () => void): this {
    if (this.closeListener === undefined) this.closeListener = listener;
    else (this.closeListeners ??= []).push(listener);
    return this;
  }

  once(_event: 'drain', listener: () => void): this {
    (this.drainListeners ??= []).push(listener);
    return this;
  }

  /** The connection's write of this response is out: 'drain', or the end. */
  drained(): void {
    if (this.finishOnDrain) {
      this.finishOnDrain = false;
      this.finish(false);
      return;
    }
    const listeners = this.drainListeners;
    this.drainListeners = undefined;
    if (listeners !== undefined) for (const listener of listeners) listener();
  }

  /** The client left (or the connection was cut) before the response was over. */
  connectionClosed(): void {
    this.emitClose();
  }

  /** Writes the head (when not out yet) and `chunk` framed as the head says; true: the kernel took all. */
  private send(chunk: Uint8Array, last: boolean): boolean {
    const connection = this.connection;
    if (connection.gone || this.destroyedByCaller) return false;
    const head = this.headersSent ? undefined : this.head;
    const body = this.hasBody ? chunk : EMPTY;
    let bytes: Uint8Array;
    if (this.chunked && this.hasBody) {
      const prefix = body.length > 0 ? `${body.length.toString(16)}\r\n` : '';
      const suffixLength = (body.length > 0 ? 2 : 0) + (last ? LAST_CHUNK.length : 0);
      const headLength = (head?.length ?? 0) + prefix.length;
      if (headLength + body.length + suffixLength === 0) return true;
      const out = Buffer.allocUnsafe(headLength + body.length + suffixLength);
      let at = head === undefined ? 0 : out.write(head, 0, 'latin1');
      at += out.write(prefix, at, 'latin1');
      out.set(body, at);
      at += body.length;
      if (body.length > 0) at += out.write('\r\n', at, 'latin1');
      if (last) LAST_CHUNK.copy(out, at);
      bytes = out;
    } else if (head !== undefined) {
      const out = Buffer.allocUnsafe(head.length + body.length);
      out.write(head, 0, 'latin1');
      out.set(body, head.length);
      bytes = out;
    } else {
      if (body.length === 0) return true;
      bytes = body;
    }
    this.headersSent = true;
    this.wrote = true;
    return connection.write(bytes, this);
  }

  private finish(justWritten: boolean): void {
    this.connection.finished(this, this.last, justWritten);
    this.emitClose();
  }

  private emitClose(): void {
    if (this.closed) return;
    this.closed = true;
    const first = this.closeListener;
    const listeners = this.closeListeners;
    this.closeListener = undefined;
    this.closeListeners = undefined;
    if (listeners !== undefined) process.nextTick(runAll, first, listeners);
    else if (first !== undefined) process.nextTick(first);
  }
}

function runAll(first: () => void, listeners: (() => void)[]): void {
  first();
  for (const listener of listeners) listener();
}
