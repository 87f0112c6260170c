/**
 * The two sides of a TCP tunnel, each a `TcpSide`: on a bare libuv TCP handle (the fast path) or
 * on a net.Socket (the public-API path, the fallback).
 *
 * Why bare handles: the net.Socket of each side is most of Node's user-space cost of a short
 * connection (its Duplex stream, the lookup and connect steps, the 'connect'/'end'/'finish'/'close'
 * events each a tick of its own, the Writable layer and a WriteWrap per write). The handle is the
 * libuv stream the socket would hold, driven directly: connected with a TCPConnectWrap (origin),
 * read into the tunnel's buffers and written to through stream-handle.ts, shut down with a
 * ShutdownWrap, closed (or reset). An accepted client is admitted on its handle before net makes a
 * socket of it (`acceptHandles`, `takeAccepted`); one that net made a socket of first (l4-proxy.ts
 * says which) has its handle taken out of the socket once admitted (`takeClient`), and the emptied
 * socket is destroyed (the server's connection count). The constructors come from
 * `process.binding('tcp_wrap')` and `process.binding('stream_wrap')`, Node internals (checked by
 * tcp-sides.test.ts): where one is missing, or under --pending-deprecation, the sides are
 * net.Sockets; so is an origin given by name (its lookup is the origin policy's), and a client
 * whose socket was already read from (a PROXY header).
 *
 * The origin policy decides both: the bare handle is only connected to an IP literal that
 * `checkLiteral` allows, the check `ScopedOriginGuard.connect` makes before its own connect.
 */
import type net from 'node:net';
import { isIP, type Server, type Socket } from 'node:net';
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

/** What the tunnel hears from one side (in the order a net.Socket would say it). */
export interface SideEvents {
  /** The peer sent FIN. */
  onEnd(): void;
  onError(error: Error): void;
  /** Once, last; `hadError`: it ended on an error (a failed connect included). */
  onClose(hadError: boolean): void;
}

export interface OriginEvents extends SideEvents {
  onConnect(): void;
}

/** A relay's reader as a side reads into it: its buffer (bare handle, net's `onread`) or chunks (`data` events). */
export interface SideReader extends HandleReader {
  /** A chunk of its own (`data` events); false: reading stops until `resume`. */
  onChunk(chunk: Buffer): boolean;
}

export interface TcpSide {
  /** true: the kernel has the bytes. false: pending; `onWritten` follows once they are out. */
  write(bytes: Uint8Array, onWritten: () => void): boolean;
  /** Whether a write is still pending. */
  readonly writePending: boolean;
  /** Starts reading, or reads again after the reader stopped them (its `onRead` returned false). */
  resume(): void;
  /** FIN once the pending writes are out. */
  end(): void;
  /** Closes now; `error`, when given, is reported first (`onError`). */
  destroy(error?: Error): void;
  /** Closes now with a reset (RST). */
  reset(): void;
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
  close(callback?: () => void): void;
  reset(callback?: () => void): number;
  getpeername(out: Partial<Endpoint>): number;
  getsockname(out: Partial<Endpoint>): number;
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
      'reset',
      'getpeername',
      'getsockname',
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
export function useTcpHandles(enabled: boolean): void {
  handlesEnabled = enabled;
}

export function tcpHandlesEnabled(): boolean {
  return handlesEnabled && TCP_HANDLE !== undefined;
}

/**
 * Connects to `host:port` as the origin policy allows: a refused address fails the connection
 * (`onError` with the OriginRefusedError, then `onClose`) without a connect. `reader` gets the
 * origin's bytes, read into its `buffer`; reading starts at the connect.
 */
export function connectOrigin(guard: ScopedOriginGuard, host: string, port: number, reader: SideReader, events: OriginEvents): TcpSide {
  const family = isIP(host);
  const internals = TCP_HANDLE;
  if (family !== 0 && internals !== undefined && handlesEnabled) {
    const side = new HandleSide(internals, new internals.TCP(internals.SOCKET), reader, events);
    const refused = guard.checkLiteral(host, port);
    if (refused !== undefined) process.nextTick(() => side.destroy(refused));
    else side.connect(host, port, family, events);
    return side;
  }
  const socket = guard.connect({
    host,
    port,
    noDelay: true,
    allowHalfOpen: true,
    onread: { buffer: () => reader.buffer as Uint8Array, callback: (bytes: number) => reader.onRead(bytes) },
  });
  socket.once('connect', () => events.onConnect());
  return new SocketSide(socket, events);
}

/**
 * The client side of a tunnel, from its accepted socket (paused, not read from yet, or read from by
 * its PROXY header's reader). Reading starts at the first `resume`.
 */
export function takeClient(socket: Socket, reader: SideReader, events: SideEvents): TcpSide {
  const internals = TCP_HANDLE;
  const accepted = socket as Socket & { _handle?: TcpHandle | null };
  const handle = accepted._handle;
  if (
    internals !== undefined &&
    handlesEnabled &&
    handle instanceof internals.TCP &&
    !socket.destroyed &&
    socket.bytesRead === 0 &&
    socket.readableLength === 0
  ) {
    // The socket lets go of its handle; destroying the emptied socket only settles the server's count.
    accepted._handle = null;
    socket.destroy();
    // A PROXY header's reader that read nothing may have left it reading: from now on it is read here.
    if (handle.reading === true) {
      handle.reading = false;
      handle.readStop?.();
    }
    const side = new HandleSide(internals, handle, reader, events);
    side.connected = true;
    return side;
  }
  socket.on('data', (chunk: Buffer) => {
    if (!reader.onChunk(chunk)) socket.pause();
  });
  return new SocketSide(socket, events);
}

/** An address and port, as a handle's getpeername and getsockname write them. */
export interface Endpoint {
  address: string;
  port: number;
}

/** A connection accepted on a bare handle, no socket made for it (`acceptHandles`). */
export interface AcceptedTcp {
  readonly handle: object;
  /** The peer's address and port. */
  readonly ip: string;
  readonly port: number;
}

/** The local address and port of an accepted connection (a system call: only when needed). */
export function localEndpoint(accepted: AcceptedTcp): Endpoint {
  const out: Partial<Endpoint> = {};
  (accepted.handle as TcpHandle).getsockname(out);
  return { address: out.address ?? '', port: out.port ?? 0 };
}

/** Where a connection handed back to net carries what `acceptHandles`' caller said of it. */
export const ACCEPT_NOTE = Symbol('acceptNote');

/**
 * Offers each connection `server` accepts to `onHandle` before net makes a socket of it (most of
 * the user-space cost of an accept): `true`, it took the bare handle (`takeAccepted`); anything
 * else, net makes the socket and emits 'connection' as usual, the socket carrying that value (when
 * not undefined) as `socket[ACCEPT_NOTE]`, and the peer address already read (net's cache of it,
 * `_peername`: no second getpeername). Installed on the server's handle (net's `onconnection`,
 * kept and called for the rest); nothing is done where this Node lacks the internals.
 */
export function acceptHandles<Note>(server: Server, onHandle: (accepted: AcceptedTcp) => true | Note | undefined): void {
  const internals = TCP_HANDLE;
  const serverHandle = (server as unknown as { _handle?: { onconnection?: unknown } | null })._handle;
  const netAccept = serverHandle?.onconnection;
  if (internals === undefined || serverHandle === undefined || serverHandle === null || typeof netAccept !== 'function') return;
  let peer: Partial<Endpoint> | undefined;
  let note: Note | undefined;
  server.prependListener('connection', (socket: Socket) => {
    const fields = socket as unknown as { _peername?: object | null; [ACCEPT_NOTE]?: Note };
    if (peer !== undefined) fields._peername ??= peer;
    if (note !== undefined) fields[ACCEPT_NOTE] = note;
    peer = undefined;
    note = undefined;
  });
  serverHandle.onconnection = function onconnection(this: unknown, status: number, client: unknown): void {
    if (status === 0 && handlesEnabled && client instanceof internals.TCP) {
      const handle = client as TcpHandle;
      const out: Partial<Endpoint> = {};
      if (handle.getpeername(out) === 0 && typeof out.address === 'string') {
        const result = onHandle({ handle, ip: out.address, port: out.port ?? 0 });
        if (result === true) return;
        peer = out;
        note = result;
      }
    }
    netAccept.call(this, status, client);
    peer = undefined;
    note = undefined;
  };
}

/** The client side of a tunnel from a connection accepted on a bare handle (not read yet). */
export function takeAccepted(accepted: AcceptedTcp, reader: SideReader, events: SideEvents): TcpSide {
  const handle = accepted.handle as TcpHandle;
  // Nagle off, as the listener's `noDelay` does for the sockets net makes.
  handle.setNoDelay(true);
  const side = new HandleSide(TCP_HANDLE!, handle, reader, events);
  side.connected = true;
  return side;
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
class HandleSide implements TcpSide, RawHandleReader {
  destroyed = false;
  /** Connected (a client: from the start); reading starts at the first `resume`. */
  connected = false;
  private readonly internals: TcpWrapInternals;
  private readonly handle: TcpHandle;
  private readonly reader: HandleReader;
  private readonly events: SideEvents;
  /** Reading was started once (the handle's `onread` is ours). */
  private reading = false;
  private address = '';
  private port = 0;
  /** The peer sent FIN. */
  private readEnded = false;
  /** end() was called; then the shutdown completed. */
  private ending = false;
  private writeEnded = false;
  private pendingWrites = 0;
  private onWritten: (() => void) | undefined;

  constructor(internals: TcpWrapInternals, handle: TcpHandle, reader: HandleReader, events: SideEvents) {
    this.internals = internals;
    this.handle = handle;
    this.reader = reader;
    this.events = events;
  }

  get buffer(): Uint8Array | undefined {
    return this.reader.buffer;
  }

  get writePending(): boolean {
    return this.pendingWrites > 0;
  }

  connect(address: string, port: number, family: number, events: OriginEvents): void {
    this.address = address;
    this.port = port;
    const handle = this.handle;
    // Nagle off: libuv applies it to the socket it creates for the connect (no extra system call).
    handle.setNoDelay(true);
    const request = new this.internals.TCPConnectWrap();
    request.oncomplete = (status: number): void => {
      if (this.destroyed) return;
      if (status !== 0) {
        this.destroy(uvError(status, 'connect', address, port));
        return;
      }
      this.connected = true;
      this.resume();
      if (!this.destroyed) events.onConnect();
    };
    const error = family === 6 ? handle.connect6(request, address, port) : handle.connect(request, address, port);
    if (error !== 0) process.nextTick(() => this.destroy(uvError(error, 'connect', address, port)));
  }

  onRead(bytes: number): boolean {
    return this.reader.onRead(bytes);
  }

  onEnd(): void {
    this.readEnded = true;
    this.events.onEnd();
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
    if (this.destroyed || this.readEnded || !this.connected || handle.reading === true) return;
    let error: number | undefined;
    if (this.reading) {
      handle.reading = true;
      error = handle.readStart();
    } else {
      this.reading = true;
      error = readRawHandle(handle, this.reader.buffer as Uint8Array, this) ?? -22;
    }
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

  /**
   * Closes the handle and reports the close at once, not from libuv's close callback (one call
   * from C++ into JavaScript fewer per side): once `close` is called libuv neither reads into the
   * buffers nor writes from them (it closes the descriptor at once), so the tunnel may give them
   * back; a pending connect, write or shutdown completes later, cancelled, and sees `destroyed`.
   */
  destroy(error?: Error): void {
    if (this.destroyed) return;
    this.destroyed = true;
    if (error !== undefined) this.events.onError(error);
    this.handle.close();
    this.events.onClose(error !== undefined);
  }

  reset(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    // SO_LINGER 0 then close: a reset; refused (a shutdown pending) it is a plain close.
    if (this.handle.reset() !== 0) this.handle.close();
    this.events.onClose(false);
  }
}

/** The public-API path: a net.Socket (the origin policy's connect, or the accepted client). */
class SocketSide implements TcpSide {
  private readonly socket: net.Socket;
  private onWritten: (() => void) | undefined;

  constructor(socket: net.Socket, events: SideEvents) {
    this.socket = socket;
    let errored = false;
    socket.on('error', (error: Error) => {
      errored = true;
      events.onError(error);
    });
    // A socket that never had a handle (refused before any connect) closes without saying why.
    socket.on('close', (hadError: boolean | undefined) => events.onClose(hadError === true || errored));
    socket.on('end', () => events.onEnd());
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

  /**
   * After each write: once none is left. ('drain' would not do: it comes only for writes that
   * reached the high-water mark; the callbacks of writes done at once come later, and are no news.)
   */
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

  reset(): void {
    this.socket.resetAndDestroy();
  }
}
