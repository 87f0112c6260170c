/**
 * TCP forwarding: one accepted client connection, tunnelled byte for byte to one origin host.
 *
 * Life of a connection (a `TcpTunnel`):
 *   accepted (paused: the client's bytes stay in the kernel) -> connect to a host the pool picks ->
 *   on failure: mark the host down, try the next one -> connected: send the PROXY header if asked,
 *   start reading the client -> relay both ways -> half-close passed on in each direction -> both
 *   sides done (or an error, or the idle timeout) -> closed, counted, reported once.
 *
 * The relay is written by hand rather than with `pipe()`, and it is the hot path (bench/l4: a short
 * connection's user-space cost is mostly Node's socket and stream layers, so they are bypassed where
 * Node's internals allow, and the public API is the fallback where they do not):
 * - The origin side is a bare libuv TCP handle, not a net.Socket (origin-connection.ts: connect,
 *   reads, writes, shutdown and close on the handle; the origin policy's literal-address check
 *   first). A host given by name, or a Node without the internals, gets a net.Socket from the
 *   origin policy's `connect`.
 * - The client side stays the accepted net.Socket (admission, its end and errors, `end()`), but its
 *   bytes are read and written on its handle (stream-handle.ts): reads into the tunnel's buffers
 *   without the socket's reader, writes without the Writable layer and its WriteWrap per write.
 *   Without those internals: net's private `onread` fields (`ONREAD_FIELDS`), then `data` events
 *   and `socket.write`.
 * - Each direction (`Relay`) writes a chunk on as it is read and stops reading while that write is
 *   pending (the write's completion resumes it). So at most one chunk per direction waits in
 *   memory, whatever the speed difference, and the read buffer is read into again only once the
 *   write from it is done: no allocation per chunk. Buffers come from a pool and go back when the
 *   tunnel closes; a direction starts with a small one and takes a large one once a read fills the
 *   small one, so idle and short connections hold 4 KiB, bulk ones 64 KiB.
 * - Byte counts are the relays' own (bytes read and sent on).
 * - Timeouts (connect, idle) use no per-socket timer: a relayed chunk only sets a flag, and the
 *   proxy's one sweep timer (`checkTimeouts`) reads the flags, so neither a connection nor a chunk
 *   creates or refreshes a timer.
 * - `useOriginHandles(false)` (tests) runs the public-API path everywhere: net.Socket origin,
 *   `data` events and `socket.write` for the client.
 */
import { createServer, Socket, type Server } from 'node:net';
import type { HostPool, PooledHost } from '../balance/index.ts';
import type { ScopedOriginGuard } from '../../net/origin-guard.ts';
import { encodeProxyHeader, type ProxyProtocolVersion } from '../../net/proxy-protocol.ts';
import { type HandleReader, readFromHandle, STREAM_BASE, type StreamHandle, writeToHandle } from '../http/stream-handle.ts';
import { connectOrigin, type OriginConnection, type OriginEvents, originHandlesEnabled } from './origin-connection.ts';

export const DEFAULT_IDLE_TIMEOUT_MS = 5 * 60 * 1000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

const SMALL_READ_BUFFER = 4 * 1024;
const LARGE_READ_BUFFER = 64 * 1024;

/**
 * Free read buffers of the two sizes, shared by every tunnel of the process. Bounded: buffers
 * beyond the caps are left to the garbage collector (16 MiB of each size are kept at most).
 */
const readBuffers = {
  small: [] as Buffer[],
  large: [] as Buffer[],
  take(size: number): Buffer {
    // allocUnsafeSlow: a buffer of its own, not a slice of Node's shared 8 KiB pool.
    return (size === LARGE_READ_BUFFER ? this.large.pop() : this.small.pop()) ?? Buffer.allocUnsafeSlow(size);
  },
  give(buffer: Buffer): void {
    const free = buffer.length === LARGE_READ_BUFFER ? this.large : this.small;
    if (free.length < (buffer.length === LARGE_READ_BUFFER ? 256 : 4096)) free.push(buffer);
  },
};

/** net.Socket's private fields that hold what its `onread` option gave, by their symbols. */
interface OnreadFields {
  buffer: symbol;
  callback: symbol;
  generator: symbol;
}

/**
 * The symbols of those fields, read off a socket made with `onread` (Node names them kBuffer,
 * kBufferCb, kBufferGen); undefined when this Node keeps them otherwise. Exported for the test that
 * fails loudly when they change.
 */
export const ONREAD_FIELDS: OnreadFields | undefined = findOnreadFields();

function findOnreadFields(): OnreadFields | undefined {
  const generator = (): Buffer => Buffer.alloc(1);
  const callback = (): boolean => true;
  const probe = new Socket({ onread: { buffer: generator, callback } });
  const fields = probe as unknown as Record<symbol, unknown>;
  const named = new Map(Object.getOwnPropertySymbols(probe).map((symbol) => [symbol.description, symbol]));
  probe.destroy();
  const found = { buffer: named.get('kBuffer'), callback: named.get('kBufferCb'), generator: named.get('kBufferGen') };
  if (found.buffer === undefined || found.callback === undefined || found.generator === undefined) return undefined;
  // What the constructor stores for a buffer function: `true` until a handle asks for the first one.
  if (fields[found.buffer] !== true || fields[found.callback] !== callback || fields[found.generator] !== generator) return undefined;
  return { buffer: found.buffer, callback: found.callback, generator: found.generator };
}

/** What a new connection needs to know; the proxy swaps it as a whole on a live update. */
export interface TcpRoute {
  pool: HostPool;
  /** PROXY protocol version to send to the origin, or undefined for none. */
  proxyProtocol: ProxyProtocolVersion | undefined;
  idleTimeoutMs: number;
  connectTimeoutMs: number;
  /** Opens the origin connections: the origin policy checks (and pins) each host's address. */
  guard: ScopedOriginGuard;
}

export interface TcpTunnelResult {
  /** The host that carried the connection; undefined when no host could be reached. */
  host: PooledHost | undefined;
  bytesFromClient: number;
  bytesToClient: number;
  /** Why it ended, when not by both sides closing in turn. */
  reason: 'COMPLETED' | 'NO_HOST' | 'IDLE_TIMEOUT' | 'CLIENT_ERROR' | 'ORIGIN_ERROR' | 'CLOSED_BY_PROXY';
  /** From the tunnel's start (the connection admitted) to its end. */
  durationMs: number;
  /** From the tunnel's start to the origin connection (other hosts tried first included); undefined when none was made. */
  connectMs: number | undefined;
}

export interface TcpTunnelEvents {
  /** A connect to `host` failed (or the origin policy refused it); the host was marked down and the next one is tried. */
  onConnectFailure?: (host: PooledHost, error: Error) => void;
  /** Called once, when both sockets are gone. */
  onClose: (result: TcpTunnelResult) => void;
}

/**
 * Binds a TCP listener. Accepted sockets arrive paused, with Nagle off, and half-open allowed (each
 * direction is closed on its own). Rejects with the bind error (its `code` is the errno).
 */
export function listenTcp(
  address: string,
  port: number,
  onConnection: (socket: Socket) => void,
  options: { reusePort?: boolean; backlog?: number } = {},
): Promise<Server> {
  const server = createServer({ pauseOnConnect: true, noDelay: true, allowHalfOpen: true }, onConnection);
  return new Promise((resolve, reject) => {
    const onError = (error: Error) => {
      server.close();
      reject(error);
    };
    server.once('error', onError);
    server.listen(
      {
        host: address,
        port,
        ipv6Only: address.includes(':'),
        reusePort: options.reusePort ?? false,
        backlog: options.backlog ?? 4096,
      },
      () => {
        server.off('error', onError);
        resolve(server);
      },
    );
  });
}

/**
 * One direction of a tunnel: reads into buffers it owns (4 KiB at first, 64 KiB once a read fills
 * the small one: bulk transfer; from the shared pool and back to it when the tunnel ends) and sends
 * each read on with `send`. The reader of a handle (stream-handle.ts) or of net's `onread`.
 */
class Relay implements HandleReader {
  buffer: Buffer = readBuffers.take(SMALL_READ_BUFFER);
  /** A small buffer replaced by a large one while a write from it was pending: freed at the end. */
  private retired: Buffer | undefined;
  /** Bytes read (and sent on). */
  bytes = 0;
  /** Sends bytes on; false: pending, reading stops until the write is done (the buffer is in it). */
  private readonly send: (bytes: Buffer) => boolean;

  constructor(send: (bytes: Buffer) => boolean) {
    this.send = send;
  }

  onRead(length: number): boolean {
    this.bytes += length;
    const buffer = this.buffer;
    const sent = this.send(length === buffer.length ? buffer : buffer.subarray(0, length));
    if (length === SMALL_READ_BUFFER && buffer.length === SMALL_READ_BUFFER) {
      // A full small buffer: this direction carries bulk data, it gets a large one for its next read.
      if (sent) readBuffers.give(buffer);
      else this.retired = buffer;
      this.buffer = readBuffers.take(LARGE_READ_BUFFER);
    }
    return sent;
  }

  /** The buffer for net.Socket's `onread` (asked after every read). */
  readonly next = (): Buffer => this.buffer;

  /** net.Socket's `onread` callback. */
  readonly onSocketRead = (length: number): boolean => this.onRead(length);

  release(): void {
    readBuffers.give(this.buffer);
    if (this.retired !== undefined) readBuffers.give(this.retired);
    this.retired = undefined;
  }
}

export class TcpTunnel implements OriginEvents {
  private client: Socket;
  private readonly route: TcpRoute;
  private readonly events: TcpTunnelEvents;
  private readonly clientIp: string;
  private readonly clientPort: number;
  /** The current connect attempt, then the connected origin. */
  private upstream: OriginConnection | undefined;
  private host: PooledHost | undefined;
  private upstreamError: Error | undefined;
  private tried: Set<number> | undefined;
  private connected = false;
  private clientEnded = false;
  private upstreamEnded = false;
  private clientClosed = false;
  private upstreamClosed = false;
  private finished = false;
  /** Writes to the client go straight to its handle (stream-handle.ts); false: through `client.write`. */
  private directToClient = false;
  /** Reading the client waits for a write to the origin (the client's socket or handle is paused). */
  private clientReadPaused = false;
  /** The client is read through its handle (readFromHandle) rather than through its socket. */
  private clientHandle: StreamHandle | undefined;
  /** Set by every relayed chunk, cleared by `checkTimeouts`. */
  private active = false;
  /** When the current connect attempt started, then when traffic was last seen (performance.now ms). */
  private since = 0;
  private readonly fromUpstream = new Relay((bytes) => this.sendToClient(bytes));
  private readonly fromClient = new Relay((bytes) => this.sendToUpstream(bytes));
  private reason: TcpTunnelResult['reason'] = 'COMPLETED';
  private readonly startedAt = performance.now();
  /** When the origin connection was made; -1 before. */
  private connectedAt = -1;

  /**
   * Starts connecting at once; the client socket must be paused (accepted with `pauseOnConnect`).
   * `clientAddress`: the client a trusted load balancer's PROXY header named, instead of the peer.
   */
  constructor(client: Socket, route: TcpRoute, events: TcpTunnelEvents, clientAddress?: { ip: string; port: number }) {
    this.client = client;
    this.route = route;
    this.events = events;
    this.clientIp = clientAddress?.ip ?? client.remoteAddress ?? '';
    this.clientPort = clientAddress?.port ?? client.remotePort ?? 0;
    client.on('error', this.onClientError);
    client.on('close', this.onClientClose);
    this.connectNext();
  }

  /**
   * Called by the proxy's sweep timer (a few times per timeout period): fails a connect attempt
   * that takes longer than `connectTimeoutMs`, closes a connection idle for `idleTimeoutMs`.
   */
  checkTimeouts(now: number): void {
    if (!this.connected) {
      const upstream = this.upstream;
      if (upstream !== undefined && now - this.since >= this.route.connectTimeoutMs) {
        const host = this.host!;
        upstream.destroy(Object.assign(new Error(`connect to ${host.address}:${host.port} timed out`), { code: 'ETIMEDOUT' }));
      }
      return;
    }
    if (this.active) {
      this.active = false;
      this.since = now;
    } else if (now - this.since >= this.route.idleTimeoutMs) {
      this.reason = 'IDLE_TIMEOUT';
      this.client.destroy();
      this.upstream?.destroy();
    }
  }

  /** Ends the connection now (the proxy is stopping): both sides are destroyed. */
  close(): void {
    if (this.reason === 'COMPLETED') this.reason = 'CLOSED_BY_PROXY';
    this.client.destroy();
    this.upstream?.destroy();
  }

  private connectNext(): void {
    const pool = this.route.pool;
    const host = pool.pick(this.clientIp, this.tried);
    if (host === undefined) {
      this.reason = 'NO_HOST';
      // A reset, as the client would have seen had it tried the origins itself.
      this.client.resetAndDestroy();
      return;
    }
    pool.begin(host);
    this.host = host;
    this.upstreamError = undefined;
    this.since = performance.now();
    this.upstream = connectOrigin(this.route.guard, host.address, host.port, this.fromUpstream, this);
  }

  onOriginConnect(): void {
    const upstream = this.upstream!;
    const client = this.client;
    this.connected = true;
    this.connectedAt = performance.now();
    this.route.pool.markUp(this.host!);
    if (this.clientClosed) {
      upstream.destroy();
      return;
    }
    const version = this.route.proxyProtocol;
    if (version !== undefined) {
      const header = encodeProxyHeader(
        version,
        {
          sourceAddress: this.clientIp,
          sourcePort: this.clientPort,
          destinationAddress: client.localAddress ?? '',
          destinationPort: client.localPort ?? 0,
        },
        'TCP',
      );
      // Its own bytes: a pending header holds no read buffer, reading need not wait for it.
      upstream.write(header, noop);
    }
    this.since = performance.now();

    // The hot path, by hand (see the module comment): write on, stop reading while a write is pending.
    const fast = originHandlesEnabled();
    this.directToClient = fast && STREAM_BASE !== undefined;
    const readsIntoBuffers = fast && this.readClientIntoBuffers();
    const reader = this.client;
    reader.on('end', this.onClientEnd);
    if (!readsIntoBuffers) reader.on('data', this.onClientData);
    // Accepted with pauseOnConnect, the client is explicitly paused: a listener alone does not start it.
    reader.resume();
  }

  onOriginEnd(): void {
    this.upstreamEnded = true;
    this.finishSendingToClient();
  }

  onOriginError(error: Error): void {
    this.upstreamError = error;
    if (this.connected && this.reason === 'COMPLETED') this.reason = 'ORIGIN_ERROR';
  }

  /**
   * A side that closes after its FIN was passed on leaves the other side to flush and close by
   * itself (its idle timer still runs); a side that closes any other way takes the other with it.
   */
  onOriginClose(hadError: boolean): void {
    if (!this.connected) {
      this.onConnectFailed();
      return;
    }
    this.upstreamClosed = true;
    if (hadError || !this.upstreamEnded) this.client.destroy();
    this.maybeFinish();
  }

  /** Origin bytes (read into `fromUpstream`'s buffer) to the client; false: pending. */
  private sendToClient(bytes: Buffer): boolean {
    this.active = true;
    const client = this.client;
    if (this.directToClient) {
      const written = writeToHandle(client, bytes, this.onClientWritten);
      if (written !== undefined) return written;
      // No handle any more (the client is gone): nothing more goes through the handle.
      this.directToClient = false;
    }
    client.write(bytes, this.afterClientWrite);
    return client.writableLength === 0;
  }

  /**
   * After each `client.write`: once none is left, read the origin again. ('drain' would not do:
   * it comes only for writes that reached the high-water mark.)
   */
  private readonly afterClientWrite = (): void => {
    if (this.client.writableLength === 0) this.onClientWritten();
  };

  /** Client bytes to the origin; false: pending. */
  private sendToUpstream(bytes: Buffer): boolean {
    this.active = true;
    if (this.upstream!.write(bytes, this.onUpstreamWritten)) return true;
    this.clientReadPaused = true;
    return false;
  }

  /** A write to the client that was pending is out: read the origin again. */
  private readonly onClientWritten = (): void => {
    this.active = true;
    this.upstream?.resume();
  };

  /** A write to the origin that was pending is out: read the client again. */
  private readonly onUpstreamWritten = (): void => {
    this.active = true;
    if (!this.clientReadPaused) return;
    this.clientReadPaused = false;
    const handle = this.clientHandle;
    if (handle === undefined) {
      this.client.resume();
      return;
    }
    if (handle.reading === true || this.client.destroyed) return;
    handle.reading = true;
    handle.readStart?.();
  };

  private readonly onClientData = (chunk: Buffer): void => {
    this.fromClient.bytes += chunk.length;
    // A chunk of its own (not a reused buffer): pausing is only for backpressure.
    if (!this.sendToUpstream(chunk)) this.client.pause();
  };

  /**
   * Makes the client's reads go into the tunnel's buffers (see the module comment): through its
   * handle (stream-handle.ts) when this Node allows it, else in place with net's `onread` fields.
   * Only before the first read, while the accepted socket is still paused. False: neither was
   * possible, the client is read through `data` events.
   */
  private readClientIntoBuffers(): boolean {
    const accepted = this.client as Socket & { _handle?: StreamHandle | null };
    const handle = accepted._handle;
    if (handle === undefined || handle === null || accepted.destroyed || accepted.bytesRead > 0) return false;
    const read = readFromHandle(accepted, this.fromClient.buffer, this.fromClient);
    if (read !== undefined) {
      this.clientHandle = read;
      return true;
    }
    const fields = ONREAD_FIELDS;
    if (fields !== undefined && typeof handle.useUserBuffer === 'function') {
      // What the Socket constructor does with `onread` and a handle (initSocketHandle).
      const own = accepted as unknown as Record<symbol, unknown>;
      own[fields.generator] = this.fromClient.next;
      own[fields.callback] = this.fromClient.onSocketRead;
      own[fields.buffer] = this.fromClient.buffer;
      handle.useUserBuffer(this.fromClient.buffer);
      return true;
    }
    return false;
  }

  /** The client sent FIN: pass it on once what it sent before has been written. */
  private readonly onClientEnd = (): void => {
    this.clientEnded = true;
    const upstream = this.upstream!;
    if (this.upstreamEnded && !upstream.writePending) upstream.destroy();
    else upstream.end();
  };

  /**
   * The origin sent FIN: send it on once its pending writes are out. When the client has sent FIN
   * too and nothing is pending, closing the socket says the same on the wire (FIN) one system call
   * cheaper than shutdown-then-close, which matters for short connections.
   */
  private finishSendingToClient(): void {
    const client = this.client;
    if (this.clientEnded && client.writableLength === 0 && !this.clientWritePending()) client.destroy();
    else client.end();
  }

  /** A direct write to the client is still queued in libuv (the client's Writable does not know of it). */
  private clientWritePending(): boolean {
    const handle = (this.client as unknown as { _handle?: { writeQueueSize?: number } | null })._handle;
    return (handle?.writeQueueSize ?? 0) > 0;
  }

  private readonly onClientError = (): void => {
    if (this.reason === 'COMPLETED') this.reason = 'CLIENT_ERROR';
  };

  private readonly onClientClose = (hadError: boolean): void => {
    this.clientClosed = true;
    const upstream = this.upstream;
    if (upstream !== undefined && (!this.connected || hadError || !this.clientEnded)) upstream.destroy();
    this.maybeFinish();
  };

  /** The attempt failed (refused, unreachable, timed out) or was aborted because the client left. */
  private onConnectFailed(): void {
    const host = this.host!;
    const pool = this.route.pool;
    pool.end(host);
    this.host = undefined;
    this.upstream = undefined;
    if (this.clientClosed) {
      this.maybeFinish();
      return;
    }
    pool.markDown(host);
    this.events.onConnectFailure?.(host, this.upstreamError ?? new Error('connect failed'));
    (this.tried ??= new Set()).add(host.index);
    this.connectNext();
  }

  private maybeFinish(): void {
    if (this.finished || !this.clientClosed) return;
    if (this.upstream !== undefined && !this.upstreamClosed) return;
    this.finished = true;
    // Both sides are closed: no write refers to the read buffers any more.
    this.fromUpstream.release();
    this.fromClient.release();
    const host = this.host;
    if (host !== undefined) this.route.pool.end(host);
    this.events.onClose({
      host,
      bytesFromClient: this.fromClient.bytes,
      bytesToClient: this.fromUpstream.bytes,
      reason: this.reason,
      durationMs: performance.now() - this.startedAt,
      connectMs: this.connectedAt < 0 ? undefined : this.connectedAt - this.startedAt,
    });
  }
}

function noop(): void {}
