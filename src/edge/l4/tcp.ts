/**
 * TCP forwarding: one accepted client connection, tunnelled byte for byte to one origin host.
 *
 * Life of a connection (a `TcpTunnel`):
 *   accepted (paused: the client's bytes stay in the kernel) -> connect to a host the pool picks ->
 *   on failure: mark the host down, try the next one -> connected: send the PROXY header if asked,
 *   start reading the client -> relay both ways -> half-close passed on in each direction -> both
 *   sides done (or an error, or the idle timeout) -> closed, counted, reported once.
 *
 * The relay is written by hand rather than with `pipe()`, and it is the hot path:
 * - Each direction writes a chunk on as it is read and stops reading while the other side's write
 *   is pending; `drain` resumes it. So at most one socket buffer (the write high-water mark plus one
 *   chunk) waits in memory per direction, whatever the speed difference.
 * - Origin to client (downloads, usually the heavy direction) reads into a buffer the tunnel owns
 *   (`onread` of `net.connect`) instead of a fresh 64 KiB allocation per read: no allocation and no
 *   stream machinery per chunk. A full buffer is written as it is; the buffer is read into again
 *   only once that write is done. Buffers come from a pool and go back when the tunnel closes; a
 *   tunnel starts with a small one and takes a large one once a read fills the small one, so idle
 *   and short connections hold 4 KiB, bulk ones 64 KiB.
 * - Client to origin does the same: Node offers `onread` only for sockets it creates, so once the
 *   origin is connected the accepted socket is given the fields `onread` would have set (net.Socket's
 *   private kBuffer, kBufferCb and kBufferGen, found once by their names: `ONREAD_FIELDS`), or else
 *   its handle is moved into a socket made with `onread` (`adoptClient`). Both rely on private
 *   fields (checked at run time: without them the tunnel falls back to the accepted socket's `data`
 *   events); the first spares a socket object per connection.
 * - Byte counts come from the sockets' own counters when the connection ends.
 * - Timeouts (connect, idle) use no per-socket timer: a relayed chunk only sets a flag, and the
 *   proxy's one sweep timer (`checkTimeouts`) reads the flags, so neither a connection nor a chunk
 *   creates or refreshes a timer.
 */
import { createServer, Socket, type Server } from 'node:net';
import type { HostPool, PooledHost } from '../balance/index.ts';
import type { ScopedOriginGuard } from '../../net/origin-guard.ts';
import { encodeProxyHeader, type ProxyProtocolVersion } from '../../net/proxy-protocol.ts';

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
 * The read buffer of one direction of a tunnel: 4 KiB at first, 64 KiB once a read fills the small
 * one (bulk transfer), from the shared pool and back to it when the tunnel ends.
 */
class ReadBuffers {
  private current: Buffer | undefined;
  /** A small buffer replaced by a large one while a write from it was pending: freed at the end. */
  private retired: Buffer | undefined;

  next(): Buffer {
    this.current ??= readBuffers.take(SMALL_READ_BUFFER);
    return this.current;
  }

  /** Writes `buffer[0, length)` to `to`; false (stop reading) while that write is pending. */
  relay(to: Socket, length: number, buffer: Buffer): boolean {
    to.write(length === buffer.length ? buffer : buffer.subarray(0, length));
    const pending = to.writableLength > 0;
    if (length === buffer.length && buffer.length === SMALL_READ_BUFFER) {
      // A full small buffer: this direction carries bulk data, it gets a large one for its next read.
      if (pending) this.retired = buffer;
      else readBuffers.give(buffer);
      this.current = readBuffers.take(LARGE_READ_BUFFER);
    }
    // While the write is pending it still reads from the buffer: no read into it until it is done.
    return !pending;
  }

  release(): void {
    if (this.current !== undefined) readBuffers.give(this.current);
    if (this.retired !== undefined) readBuffers.give(this.retired);
    this.current = undefined;
    this.retired = undefined;
  }
}

export class TcpTunnel {
  private client: Socket;
  private readonly route: TcpRoute;
  private readonly events: TcpTunnelEvents;
  private readonly clientIp: string;
  private readonly clientPort: number;
  /** The current connect attempt, then the connected origin socket. */
  private upstream: Socket | undefined;
  private host: PooledHost | undefined;
  private upstreamError: Error | undefined;
  private tried: Set<number> | undefined;
  private connected = false;
  private clientEnded = false;
  private upstreamEnded = false;
  private clientClosed = false;
  private upstreamClosed = false;
  private finished = false;
  /** Set by every relayed chunk, cleared by `checkTimeouts`. */
  private active = false;
  /** When the current connect attempt started, then when traffic was last seen (performance.now ms). */
  private since = 0;
  /** The buffers the origin socket and the (adopted) client socket read into (see the module comment). */
  private readonly fromUpstream = new ReadBuffers();
  private readonly fromClient = new ReadBuffers();
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

  /** Ends the connection now (the proxy is stopping): both sockets are destroyed. */
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
    const upstream = this.route.guard.connect({
      host: host.address,
      port: host.port,
      noDelay: true,
      allowHalfOpen: true,
      onread: { buffer: this.nextReadBuffer, callback: this.onUpstreamRead },
    });
    this.upstream = upstream;
    this.since = performance.now();
    upstream.on('error', this.onUpstreamError);
    upstream.on('close', this.onUpstreamClose);
    upstream.once('connect', this.onUpstreamConnect);
  }

  private readonly onUpstreamConnect = (): void => {
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
      upstream.write(
        encodeProxyHeader(
          version,
          {
            sourceAddress: this.clientIp,
            sourcePort: this.clientPort,
            destinationAddress: client.localAddress ?? '',
            destinationPort: client.localPort ?? 0,
          },
          'TCP',
        ),
      );
    }
    this.since = performance.now();

    // The hot path, by hand (see the module comment): write on, pause on a full buffer, resume on drain.
    const readsIntoBuffers = this.adoptClient();
    const reader = this.client;
    reader.on('drain', this.onClientDrain);
    upstream.on('end', this.onUpstreamEnd);
    upstream.on('drain', this.onUpstreamDrain);
    reader.on('end', this.onClientEnd);
    if (!readsIntoBuffers) reader.on('data', this.onClientData);
    // Accepted with pauseOnConnect, the client is explicitly paused: a listener alone does not start it.
    reader.resume();
  };

  private readonly onClientData = (chunk: Buffer): void => {
    this.active = true;
    if (!this.upstream!.write(chunk)) this.client.pause();
  };

  private readonly onUpstreamDrain = (): void => {
    this.active = true;
    this.client.resume();
  };

  /** Origin bytes in `buffer[0, length)`; returning false stops reading until `onClientDrain`. */
  private readonly onUpstreamRead = (length: number, buffer: Buffer): boolean => {
    this.active = true;
    return this.fromUpstream.relay(this.client, length, buffer);
  };

  /** Node asks which buffer the origin socket reads into next: at connect, then after every read. */
  private readonly nextReadBuffer = (): Buffer => this.fromUpstream.next();

  /** Client bytes (adopted socket); returning false stops reading until `onUpstreamDrain`. */
  private readonly onClientRead = (length: number, buffer: Buffer): boolean => {
    this.active = true;
    return this.fromClient.relay(this.upstream!, length, buffer);
  };

  private readonly nextClientBuffer = (): Buffer => this.fromClient.next();

  /**
   * Makes the accepted socket read into the tunnel's buffers (see the module comment): in place
   * when net's `onread` fields are known, else by moving its handle into a socket made with
   * `onread`. Only before the first read, while the accepted socket is still paused. False: neither
   * was possible, the client is read through `data` events.
   */
  private adoptClient(): boolean {
    const accepted = this.client as Socket & { _handle?: { useUserBuffer?: (buffer: Buffer) => void } | null };
    const handle = accepted._handle;
    if (handle === undefined || handle === null || accepted.destroyed || accepted.bytesRead > 0) return false;
    const fields = ONREAD_FIELDS;
    if (fields !== undefined && typeof handle.useUserBuffer === 'function') {
      // What the Socket constructor does with `onread` and a handle (initSocketHandle).
      const own = accepted as unknown as Record<symbol, unknown>;
      const buffer = this.nextClientBuffer();
      own[fields.generator] = this.nextClientBuffer;
      own[fields.callback] = this.onClientRead;
      own[fields.buffer] = buffer;
      handle.useUserBuffer(buffer);
      return true;
    }
    accepted.off('error', this.onClientError);
    accepted.off('close', this.onClientClose);
    accepted._handle = null;
    accepted.destroy();
    const adopted = new Socket({
      handle: handle as object,
      allowHalfOpen: true,
      readable: true,
      writable: true,
      // The handle has Nagle off already (the listener's noDelay); saying so here spares the
      // setsockopt that setNoDelay(true) would repeat on every connection.
      noDelay: true,
      onread: { buffer: this.nextClientBuffer, callback: this.onClientRead },
    } as ConstructorParameters<typeof Socket>[0]);
    adopted.on('error', this.onClientError);
    adopted.on('close', this.onClientClose);
    this.client = adopted;
    return true;
  }

  private readonly onClientDrain = (): void => {
    this.active = true;
    this.upstream!.resume();
  };

  /** The client sent FIN: pass it on once what it sent before has been written. */
  private readonly onClientEnd = (): void => {
    this.clientEnded = true;
    finishSending(this.upstream!, this.upstreamEnded);
  };

  private readonly onUpstreamEnd = (): void => {
    this.upstreamEnded = true;
    finishSending(this.client, this.clientEnded);
  };

  private readonly onClientError = (): void => {
    if (this.reason === 'COMPLETED') this.reason = 'CLIENT_ERROR';
  };

  private readonly onUpstreamError = (error: Error): void => {
    this.upstreamError = error;
    if (this.connected && this.reason === 'COMPLETED') this.reason = 'ORIGIN_ERROR';
  };

  /**
   * A side that closes after its FIN was passed on leaves the other side to flush and close by
   * itself (its idle timer still runs); a side that closes any other way takes the other with it.
   */
  private readonly onClientClose = (hadError: boolean): void => {
    this.clientClosed = true;
    const upstream = this.upstream;
    if (upstream !== undefined && (!this.connected || hadError || !this.clientEnded)) upstream.destroy();
    this.maybeFinish();
  };

  private readonly onUpstreamClose = (hadError: boolean): void => {
    if (!this.connected) {
      this.onConnectFailed();
      return;
    }
    this.upstreamClosed = true;
    if (hadError || !this.upstreamEnded) this.client.destroy();
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
    // Both sockets are closed: no write refers to the read buffers any more.
    this.fromUpstream.release();
    this.fromClient.release();
    const host = this.host;
    if (host !== undefined) this.route.pool.end(host);
    this.events.onClose({
      host,
      bytesFromClient: this.client.bytesRead,
      bytesToClient: this.client.bytesWritten,
      reason: this.reason,
      durationMs: performance.now() - this.startedAt,
      connectMs: this.connectedAt < 0 ? undefined : this.connectedAt - this.startedAt,
    });
  }
}

/**
 * Sends FIN on `socket` once its pending writes are out. When its peer has already sent FIN too and
 * nothing is pending, closing the socket says the same on the wire (FIN) one system call cheaper
 * than shutdown-then-close, which matters for short connections.
 */
function finishSending(socket: Socket, peerEnded: boolean): void {
  if (peerEnded && socket.writableLength === 0) socket.destroy();
  else socket.end();
}
