/**
 * The origin side of a TCP tunnel: one connection to one origin host, either on a bare libuv TCP
 * handle (the fast path) or on a net.Socket (the public-API path, the fallback).
 *
 * Why a bare handle: a net.Socket per origin connection is most of Node's user-space cost of a short
 * connection (its Duplex stream, the lookup and connect steps, the 'connect'/'end'/'finish'/'close'
 * events each a tick of its own, the Writable layer and a WriteWrap per write). The handle is the
 * same libuv stream the socket would hold: connected with a TCPConnectWrap, read into the tunnel's
 * buffers and written to through stream-handle.ts, shut down with a ShutdownWrap, closed. The
 * constructors come from `process.binding('tcp_wrap')` and `process.binding('stream_wrap')`, Node
 * internals (checked by origin-connection.test.ts): where one is missing, or under
 * --pending-deprecation, or when the host is a name (its lookup is the origin policy's), the
 * connection is a net.Socket from `ScopedOriginGuard.connect`.
 *
 * The origin policy decides both: the bare handle is only opened to an IP literal that
 * `checkLiteral` allows, the check `ScopedOriginGuard.connect` makes before its own connect.
 */
import type net from 'node:net';
import { isIP } from 'node:net';
import { getSystemErrorName } from 'node:util';
import type { ScopedOriginGuard } from '../../net/origin-guard.ts';
import {
  type HandleReader,
  type RawHandleReader,
  readRawHandle,
  STREAM_BASE,
  type StreamHandle,
  writeToHandle,
} from '../http/stream-handle.ts';

/** What the tunnel hears from its origin connection (the order a net.Socket would say it in). */
export interface OriginEvents {
  onOriginConnect(): void;
  /** The origin sent FIN. */
  onOriginEnd(): void;
  onOriginError(error: Error): void;
  /** Once, last; `hadError`: it ended on an error (a failed connect included). */
  onOriginClose(hadError: boolean): void;
}

export interface OriginConnection {
  /** true: the kernel has the bytes. false: pending; `onWritten` follows once they are out. */
  write(bytes: Uint8Array, onWritten: () => void): boolean;
  /** Whether a write is still pending. */
  readonly writePending: boolean;
  /** Reads again after the reader stopped them (its `onRead` returned false). */
  resume(): void;
  /** FIN once the pending writes are out. */
  end(): void;
  /** Closes now; `error`, when given, is reported first (`onOriginError`). */
  destroy(error?: Error): void;
}

interface ConnectRequest {
  oncomplete?: (status: number) => void;
}

interface ShutdownRequest {
  oncomplete?: (status: number) => void;
}

/** What this module uses of a libuv TCP handle. */
interface TcpHandle extends StreamHandle {
  connect(request: ConnectRequest, address: string, port: number): number;
  connect6(request: ConnectRequest, address: string, port: number): number;
  setNoDelay(enable: boolean): number;
  shutdown(request: ShutdownRequest): number;
  close(callback: () => void): void;
  readStart(): number;
  reading?: boolean;
}

interface TcpWrapInternals {
  readonly TCP: new (type: number) => TcpHandle;
  readonly TCPConnectWrap: new () => ConnectRequest;
  readonly ShutdownWrap: new () => ShutdownRequest;
  /** The TCP constructor's type for a client socket. */
  readonly SOCKET: number;
}

type Binding = (name: string) => Record<string, unknown>;

/** The internals of the fast path; undefined on a Node without them (or where stream-handle.ts is off). */
export const TCP_HANDLE: TcpWrapInternals | undefined = ((): TcpWrapInternals | undefined => {
  // stream-handle.ts decides whether process.binding may be called at all (no deprecation warning).
  if (STREAM_BASE === undefined) return undefined;
  try {
    const binding = (process as unknown as { binding: Binding }).binding;
    const tcp = binding('tcp_wrap');
    const stream = binding('stream_wrap');
    const { TCP, TCPConnectWrap } = tcp;
    const { ShutdownWrap } = stream;
    const SOCKET = (tcp.constants as { SOCKET?: unknown } | undefined)?.SOCKET;
    if (typeof TCP !== 'function' || typeof TCPConnectWrap !== 'function' || typeof ShutdownWrap !== 'function') return undefined;
    if (typeof SOCKET !== 'number') return undefined;
    const prototype = (TCP as { prototype: Record<string, unknown> }).prototype;
    for (const method of [
      'connect',
      'connect6',
      'setNoDelay',
      'shutdown',
      'close',
      'readStart',
      'readStop',
      'useUserBuffer',
      'writeBuffer',
    ]) {
      if (typeof prototype[method] !== 'function') return undefined;
    }
    return { TCP, TCPConnectWrap, ShutdownWrap, SOCKET } as TcpWrapInternals;
  } catch {
    return undefined;
  }
})();

/** Whether tunnels use the fast path (on by default wherever the internals are there; tests turn it off). */
let handlesEnabled = true;

/** Tests: run the public-API path (net.Socket) where the fast path would be taken. */
export function useOriginHandles(enabled: boolean): void {
  handlesEnabled = enabled;
}

export function originHandlesEnabled(): boolean {
  return handlesEnabled && TCP_HANDLE !== undefined;
}

/**
 * Connects to `host:port` as the origin policy allows: a refused address fails the connection
 * (`onOriginError` with the OriginRefusedError, then `onOriginClose`) without a connect.
 * `reader` gets the origin's bytes, read into its `buffer`.
 */
export function connectOrigin(
  guard: ScopedOriginGuard,
  host: string,
  port: number,
  reader: HandleReader,
  events: OriginEvents,
): OriginConnection {
  const family = isIP(host);
  const internals = TCP_HANDLE;
  if (family !== 0 && internals !== undefined && handlesEnabled) {
    const connection = new HandleOrigin(internals, reader, events);
    const refused = guard.checkLiteral(host, port);
    if (refused !== undefined) process.nextTick(() => connection.destroy(refused));
    else connection.connect(host, port, family);
    return connection;
  }
  const socket = guard.connect({
    host,
    port,
    noDelay: true,
    allowHalfOpen: true,
    onread: { buffer: () => reader.buffer as Uint8Array, callback: (bytes: number) => reader.onRead(bytes) },
  });
  return new SocketOrigin(socket, events);
}

function uvError(errno: number, syscall: string, address: string, port: number): NodeJS.ErrnoException {
  let code: string;
  try {
    code = getSystemErrorName(errno);
  } catch {
    code = `E${-errno}`;
  }
  return Object.assign(new Error(`${syscall} ${code} ${address}:${port}`), { code, errno, syscall });
}

/** The fast path: a bare libuv TCP handle (see the module comment). */
class HandleOrigin implements OriginConnection, RawHandleReader {
  destroyed = false;
  private readonly internals: TcpWrapInternals;
  private readonly handle: TcpHandle;
  private readonly reader: HandleReader;
  private readonly events: OriginEvents;
  private connected = false;
  private address = '';
  private port = 0;
  /** The origin sent FIN. */
  private readEnded = false;
  /** end() was called; then the shutdown completed. */
  private ending = false;
  private writeEnded = false;
  private pendingWrites = 0;
  private onWritten: (() => void) | undefined;

  constructor(internals: TcpWrapInternals, reader: HandleReader, events: OriginEvents) {
    this.internals = internals;
    this.reader = reader;
    this.events = events;
    this.handle = new internals.TCP(internals.SOCKET);
  }

  get buffer(): Uint8Array | undefined {
    return this.reader.buffer;
  }

  get writePending(): boolean {
    return this.pendingWrites > 0;
  }

  connect(address: string, port: number, family: number): void {
    this.address = address;
    this.port = port;
    const handle = this.handle;
    // Nagle off: libuv applies it to the socket it creates for the connect (no extra system call).
    handle.setNoDelay(true);
    const request = new this.internals.TCPConnectWrap();
    request.oncomplete = this.afterConnect;
    const error = family === 6 ? handle.connect6(request, address, port) : handle.connect(request, address, port);
    if (error !== 0) process.nextTick(() => this.destroy(uvError(error, 'connect', address, port)));
  }

  private readonly afterConnect = (status: number): void => {
    if (this.destroyed) return;
    if (status !== 0) {
      this.destroy(uvError(status, 'connect', this.address, this.port));
      return;
    }
    this.connected = true;
    const reading = readRawHandle(this.handle, this.reader.buffer as Uint8Array, this);
    if (reading !== 0) {
      this.destroy(uvError(reading ?? -22, 'read', this.address, this.port));
      return;
    }
    this.events.onOriginConnect();
  };

  onRead(bytes: number): boolean {
    return this.reader.onRead(bytes);
  }

  onEnd(): void {
    this.readEnded = true;
    this.events.onOriginEnd();
    // As a net.Socket allowing half-open connections: closed once both directions are done.
    if (this.writeEnded) this.destroy();
  }

  onError(errno: number): void {
    this.destroy(uvError(errno, 'read', this.address, this.port));
  }

  write(bytes: Uint8Array, onWritten: () => void): boolean {
    if (this.destroyed) return true;
    const written = writeToHandle(this, bytes, this.afterWrite, this.handle);
    if (written !== false) return true;
    if (!this.destroyed) {
      this.pendingWrites++;
      this.onWritten = onWritten;
    }
    return false;
  }

  private readonly afterWrite = (): void => {
    this.pendingWrites--;
    const onWritten = this.onWritten;
    if (this.pendingWrites === 0 && onWritten !== undefined) {
      this.onWritten = undefined;
      onWritten();
    }
  };

  resume(): void {
    const handle = this.handle;
    if (this.destroyed || this.readEnded || handle.reading === true) return;
    handle.reading = true;
    const error = handle.readStart();
    if (error !== 0) this.destroy(uvError(error, 'read', this.address, this.port));
  }

  end(): void {
    if (this.destroyed || this.ending) return;
    this.ending = true;
    if (!this.connected) {
      this.destroy();
      return;
    }
    const request = new this.internals.ShutdownWrap();
    request.oncomplete = this.afterShutdown;
    // libuv shuts the socket down once the writes queued before are out.
    const error = this.handle.shutdown(request);
    if (error !== 0) this.afterShutdown(error);
  }

  private readonly afterShutdown = (status: number): void => {
    if (this.destroyed) return;
    if (status < 0) {
      this.destroy(uvError(status, 'shutdown', this.address, this.port));
      return;
    }
    this.writeEnded = true;
    if (this.readEnded) this.destroy();
  };

  destroy(error?: Error): void {
    if (this.destroyed) return;
    this.destroyed = true;
    if (error !== undefined) this.events.onOriginError(error);
    const hadError = error !== undefined;
    // A pending connect, write or shutdown completes (cancelled) before the close callback: each
    // sees `destroyed` and does nothing.
    this.handle.close(() => this.events.onOriginClose(hadError));
  }
}

/** The public-API path: a net.Socket from the origin policy's connect. */
class SocketOrigin implements OriginConnection {
  private readonly socket: net.Socket;
  private onWritten: (() => void) | undefined;

  constructor(socket: net.Socket, events: OriginEvents) {
    this.socket = socket;
    let errored = false;
    socket.on('error', (error: Error) => {
      errored = true;
      events.onOriginError(error);
    });
    // A socket that never had a handle (refused before any connect) closes without saying why.
    socket.on('close', (hadError: boolean | undefined) => events.onOriginClose(hadError === true || errored));
    socket.once('connect', () => events.onOriginConnect());
    socket.on('end', () => events.onOriginEnd());
  }

  get writePending(): boolean {
    return this.socket.writableLength > 0;
  }

  write(bytes: Uint8Array, onWritten: () => void): boolean {
    const socket = this.socket;
    socket.write(bytes, this.afterWrite);
    if (socket.writableLength === 0) return true;
    this.onWritten = onWritten;
    return false;
  }

  /** After each write: once none is left (the callbacks of writes done at once come later, and are no news). */
  private readonly afterWrite = (): void => {
    const onWritten = this.onWritten;
    if (onWritten === undefined || this.socket.writableLength > 0) return;
    this.onWritten = undefined;
    onWritten();
  };

  resume(): void {
    this.socket.resume();
  }

  end(): void {
    this.socket.end();
  }

  destroy(error?: Error): void {
    this.socket.destroy(error);
  }
}
