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
 * - Both sides are bare libuv TCP handles, not net.Sockets (tcp-sides.ts): the origin connected on
 *   one (after the origin policy's literal-address check); the client admitted on its accepted
 *   handle before net makes a socket of it (`acceptHandles`, L4Proxy's `onTcpHandle`), or taken
 *   out of its socket once admitted (refused, listed or PROXY-header connections take net's
 *   socket path); reads into the tunnel's buffers, writes, shutdown and close straight on the
 *   handles (stream-handle.ts). The fallback, where Node lacks the internals, is net.Sockets: the
 *   origin policy's `connect` (also for an origin given by name), the accepted socket itself (also
 *   when a PROXY header's reader read from it), `data` events and `socket.write`.
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
 * - `useTcpHandles(false)` (tests) runs the public-API path everywhere.
 */
import { createServer, Socket, type Server } from 'node:net';
import type { HostPool, PooledHost } from '../balance/index.ts';
import type { ScopedOriginGuard } from '../../net/origin-guard.ts';
import { encodeProxyHeader, type ProxyProtocolVersion } from '../../net/proxy-protocol.ts';
import {
  type AcceptedTcp,
  connectOrigin,
  localEndpoint,
  type OriginEvents,
  type SideEvents,
  type SideReader,
  type TcpSide,
  takeAccepted,
  takeClient,
} from './tcp-sides.ts';

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
class Relay implements SideReader {
  buffer: Buffer = readBuffers.take(SMALL_READ_BUFFER);
  /** A small buffer replaced by a large one while a write from it was pending: freed at the end. */
  private retired: Buffer | undefined;
  /** Bytes read (and sent on). */
  bytes = 0;
  private released = false;
  /** Sends bytes on; false: pending, reading stops until the write is done (the buffer is in it). */
  private readonly send: (bytes: Buffer) => boolean;

  constructor(send: (bytes: Buffer) => boolean) {
    this.send = send;
  }

  onRead(length: number): boolean {
    this.bytes += length;
    const buffer = this.buffer;
    const sent = this.send(length === buffer.length ? buffer : buffer.subarray(0, length));
    // (A failed write may have ended the tunnel, and released the buffers, within `send`.)
    if (length === SMALL_READ_BUFFER && buffer.length === SMALL_READ_BUFFER && !this.released) {
      // A full small buffer: this direction carries bulk data, it gets a large one for its next read.
      if (sent) readBuffers.give(buffer);
      else this.retired = buffer;
      this.buffer = readBuffers.take(LARGE_READ_BUFFER);
    }
    return sent;
  }

  onChunk(chunk: Buffer): boolean {
    this.bytes += chunk.length;
    return this.send(chunk);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    readBuffers.give(this.buffer);
    if (this.retired !== undefined) readBuffers.give(this.retired);
    this.retired = undefined;
  }
}

export class TcpTunnel implements OriginEvents {
  private readonly client: TcpSide;
  private readonly route: TcpRoute;
  private readonly events: TcpTunnelEvents;
  private readonly clientIp: string;
  private readonly clientPort: number;
  /** The address the client connected to, for the PROXY header (read only when one is sent). */
  private readonly frontAddress: string;
  private readonly frontPort: number;
  /** The current connect attempt, then the connected origin. */
  private upstream: TcpSide | undefined;
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
  private readonly fromUpstream = new Relay((bytes) => {
    this.active = true;
    return this.client.write(bytes, this.onClientWritten);
  });
  private readonly fromClient = new Relay((bytes) => {
    this.active = true;
    return this.upstream!.write(bytes, this.onUpstreamWritten);
  });
  private reason: TcpTunnelResult['reason'] = 'COMPLETED';
  private readonly startedAt = performance.now();
  /** When the origin connection was made; -1 before. */
  private connectedAt = -1;

  /**
   * Starts connecting at once; the client socket must be paused (accepted with `pauseOnConnect`),
   * and is the tunnel's from now on (its handle may be taken out of it: tcp-sides.ts).
   * `clientAddress`: the client a trusted load balancer's PROXY header named, instead of the peer.
   */
  constructor(client: Socket | AcceptedTcp, route: TcpRoute, events: TcpTunnelEvents, clientAddress?: { ip: string; port: number }) {
    this.route = route;
    this.events = events;
    const clientEvents: SideEvents = { onEnd: this.onClientEnd, onError: this.onClientError, onClose: this.onClientClose };
    if (client instanceof Socket) {
      this.clientIp = clientAddress?.ip ?? client.remoteAddress ?? '';
      this.clientPort = clientAddress?.port ?? client.remotePort ?? 0;
      this.frontAddress = route.proxyProtocol === undefined ? '' : (client.localAddress ?? '');
      this.frontPort = route.proxyProtocol === undefined ? 0 : (client.localPort ?? 0);
      this.client = takeClient(client, this.fromClient, clientEvents);
    } else {
      this.clientIp = clientAddress?.ip ?? client.ip;
      this.clientPort = clientAddress?.port ?? client.port;
      const front = route.proxyProtocol === undefined ? undefined : localEndpoint(client);
      this.frontAddress = front?.address ?? '';
      this.frontPort = front?.port ?? 0;
      this.client = takeAccepted(client, this.fromClient, clientEvents);
    }
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
      // A reset, as the client would have seen had it tried the origins itself. On the next tick:
      // a bare handle reports its close at once, and the tunnel may still be in its constructor.
      process.nextTick(() => this.client.reset());
      return;
    }
    pool.begin(host);
    this.host = host;
    this.upstreamError = undefined;
    this.since = performance.now();
    this.upstream = connectOrigin(this.route.guard, host.address, host.port, this.fromUpstream, this);
  }

  onConnect(): void {
    const upstream = this.upstream!;
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
          destinationAddress: this.frontAddress,
          destinationPort: this.frontPort,
        },
        'TCP',
      );
      // Its own bytes: a pending header holds no read buffer, reading need not wait for it.
      upstream.write(header, noop);
    }
    this.since = performance.now();
    // Accepted with pauseOnConnect, the client has not been read yet.
    this.client.resume();
  }

  /** The origin sent FIN: pass it on once what it sent before has been written. */
  onEnd(): void {
    this.upstreamEnded = true;
    finishSending(this.client, this.clientEnded);
  }

  onError(error: Error): void {
    this.upstreamError = error;
    if (this.connected && this.reason === 'COMPLETED') this.reason = 'ORIGIN_ERROR';
  }

  /**
   * A side that closes after its FIN was passed on leaves the other side to flush and close by
   * itself (its idle timer still runs); a side that closes any other way takes the other with it.
   */
  onClose(hadError: boolean): void {
    if (!this.connected) {
      this.onConnectFailed();
      return;
    }
    this.upstreamClosed = true;
    if (hadError || !this.upstreamEnded) this.client.destroy();
    this.maybeFinish();
  }

  /** A write to the client that was pending is out: read the origin again. */
  private readonly onClientWritten = (): void => {
    this.active = true;
    this.upstream?.resume();
  };

  /** A write to the origin that was pending is out: read the client again. */
  private readonly onUpstreamWritten = (): void => {
    this.active = true;
    this.client.resume();
  };

  /** The client sent FIN: pass it on once what it sent before has been written. */
  private readonly onClientEnd = (): void => {
    this.clientEnded = true;
    finishSending(this.upstream!, this.upstreamEnded);
  };

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
    // Both sides are closed: no read or write uses the read buffers any more.
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

/**
 * Sends FIN on `side` once its pending writes are out. When its peer has already sent FIN too and
 * nothing is pending, closing says the same on the wire (FIN) one system call cheaper than
 * shutdown-then-close, which matters for short connections.
 */
function finishSending(side: TcpSide, peerEnded: boolean): void {
  if (peerEnded && !side.writePending) side.destroy();
  else side.end();
}

function noop(): void {}
