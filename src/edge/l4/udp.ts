/**
 * UDP relaying as sessions. UDP has no connections, so the relay makes them: a session is keyed by
 * the client's address and port, holds one upstream socket connected to the host the pool picked
 * (so the kernel only lets that host's replies in, and the host's replies find their way back to
 * that one client), and ends after `sessionIdleMs` without a datagram in either direction.
 *
 * With PROXY protocol on, every datagram to the origin starts with a version 2 DGRAM header (there
 * is no version 1 for UDP), built once per session and sent with the payload in one `sendmsg` as
 * two buffers, without copying. Replies go back to the client as they come, without header.
 *
 * Sessions are bounded (`maxSessions`, each holds a file descriptor); past that, datagrams of new
 * clients are dropped. Admission (threat feed, flood caps) is the proxy's business: `admit`.
 */
import { createSocket, type Socket as DatagramSocket, type RemoteInfo, type SocketOptions } from 'node:dgram';
import { isIPv6 } from 'node:net';
import type { HostPool, PooledHost } from '../balance/index.ts';
import { isOriginRefused, type ScopedOriginGuard } from '../net/origin-guard.ts';
import { encodeProxyV2 } from './proxy-protocol.ts';

export const DEFAULT_UDP_SESSION_IDLE_MS = 30_000;
export const DEFAULT_MAX_UDP_SESSIONS = 10_000;
/** Datagrams a new session holds while its upstream socket connects; more are dropped. */
const MAX_PENDING_DATAGRAMS = 64;

/** What a new session needs to know; the proxy swaps it as a whole on a live update. */
export interface UdpRoute {
  pool: HostPool;
  /** Prepend a PROXY v2 header to every datagram to the origin. */
  proxyProtocol: boolean;
  sessionIdleMs: number;
  /** The origin policy: a host's address is checked (a name once resolved) before a session uses it. */
  guard: ScopedOriginGuard;
}

export interface UdpSessionResult {
  host: PooledHost;
  bytesFromClient: number;
  bytesToClient: number;
  reason: 'IDLE_TIMEOUT' | 'ORIGIN_ERROR' | 'CLOSED_BY_PROXY';
}

/** Opaque to the relay: whatever `admit` returns is given back to `release`. */
export interface UdpRelayHooks<Ticket> {
  /** First datagram of a would-be session: a ticket admits it, undefined drops the datagram. */
  admit: (clientAddress: string, clientPort: number) => Ticket | undefined;
  /** The route new sessions take (read at each new session). */
  route: () => UdpRoute;
  /** A datagram of a new client was dropped because `maxSessions` sessions exist. */
  onSessionLimit?: () => void;
  /** An origin failed, or the origin policy refused it (the datagram that asked for it is dropped). */
  onOriginError?: (host: PooledHost, error: Error) => void;
  /** A session ended; its ticket is handed back. */
  onSessionClose: (ticket: Ticket, result: UdpSessionResult) => void;
}

export interface UdpRelayOptions {
  address: string;
  port: number;
  maxSessions?: number;
  reusePort?: boolean;
}

class UdpSession<Ticket> {
  readonly key: string;
  readonly clientAddress: string;
  readonly clientPort: number;
  readonly host: PooledHost;
  readonly ticket: Ticket;
  readonly upstream: DatagramSocket;
  readonly header: Buffer | undefined;
  readonly route: UdpRoute;
  connected = false;
  /** The origin has answered: it is alive, sends no longer need to watch for ICMP errors. */
  answered = false;
  pending: Buffer[] | undefined = [];
  lastActive: number;
  bytesFromClient = 0;
  bytesToClient = 0;

  constructor(
    key: string,
    rinfo: RemoteInfo,
    host: PooledHost,
    ticket: Ticket,
    upstream: DatagramSocket,
    header: Buffer | undefined,
    route: UdpRoute,
    now: number,
  ) {
    this.key = key;
    this.clientAddress = rinfo.address;
    this.clientPort = rinfo.port;
    this.host = host;
    this.ticket = ticket;
    this.upstream = upstream;
    this.header = header;
    this.route = route;
    this.lastActive = now;
  }
}

export class UdpRelay<Ticket> {
  readonly address: string;
  readonly port: number;
  private readonly maxSessions: number;
  private readonly reusePort: boolean;
  private readonly hooks: UdpRelayHooks<Ticket>;
  private readonly sessions = new Map<string, UdpSession<Ticket>>();
  private socket: DatagramSocket | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private sweepEveryMs = 0;

  constructor(options: UdpRelayOptions, hooks: UdpRelayHooks<Ticket>) {
    this.address = options.address;
    this.port = options.port;
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_UDP_SESSIONS;
    this.reusePort = options.reusePort ?? false;
    this.hooks = hooks;
  }

  get sessionCount(): number {
    return this.sessions.size;
  }

  /** Binds the front-end socket; rejects with the bind error (its `code` is the errno). */
  async start(): Promise<void> {
    const socket = createSocket({
      type: isIPv6(this.address) ? 'udp6' : 'udp4',
      ipv6Only: isIPv6(this.address),
      reusePort: this.reusePort,
      // Replies go to client addresses, always IP literals: no resolver round trip per datagram.
      lookup: (address, _options, callback) => callback(null, address, isIPv6(address) ? 6 : 4),
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind({ address: this.address, port: this.port, exclusive: true }, () => {
        socket.off('error', reject);
        resolve();
      });
    }).catch((error: unknown) => {
      socket.close();
      throw error;
    });
    // Errors after the bind (a send to a vanished client) concern one datagram, not the relay.
    socket.on('error', () => {});
    socket.on('message', this.onClientMessage);
    this.socket = socket;
  }

  /** Closes the front-end socket and every session. */
  async stop(): Promise<void> {
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    this.sweeper = undefined;
    for (const session of [...this.sessions.values()]) this.closeSession(session, 'CLOSED_BY_PROXY');
    const socket = this.socket;
    this.socket = undefined;
    if (socket !== undefined) await new Promise<void>((resolve) => socket.close(() => resolve()));
  }

  private readonly onClientMessage = (message: Buffer, rinfo: RemoteInfo): void => {
    // Hand-written hot path: one map lookup and one send for a datagram of a known client.
    const key = `${rinfo.address} ${rinfo.port}`;
    const session = this.sessions.get(key) ?? this.openSession(key, rinfo);
    if (session === undefined) return;
    session.lastActive = performance.now();
    session.bytesFromClient += message.length;
    if (session.connected) this.sendToOrigin(session, message);
    else if (session.pending !== undefined && session.pending.length < MAX_PENDING_DATAGRAMS) session.pending.push(message);
  };

  private sendToOrigin(session: UdpSession<Ticket>, message: Buffer): void {
    const payload = session.header !== undefined ? [session.header, message] : message;
    // A closed port answers with ICMP, which the kernel reports on the next send or receive of the
    // connected socket. Node drops a send's error when the send has no callback, so sends watch for
    // it until the origin has answered once; after that the cheaper send without callback is used.
    if (session.answered) session.upstream.send(payload);
    else {
      session.upstream.send(payload, (error) => {
        if (error) this.onOriginError(session, error);
      });
    }
  }

  private onOriginError(session: UdpSession<Ticket>, error: Error): void {
    if (this.sessions.get(session.key) !== session) return; // already ended (a second error)
    // ECONNREFUSED on a connected UDP socket = ICMP port unreachable: passive health. A host the
    // origin policy refused is skipped the same way.
    if ((error as NodeJS.ErrnoException).code === 'ECONNREFUSED' || isOriginRefused(error)) session.route.pool.markDown(session.host);
    this.hooks.onOriginError?.(session.host, error);
    this.closeSession(session, 'ORIGIN_ERROR');
  }

  private openSession(key: string, rinfo: RemoteInfo): UdpSession<Ticket> | undefined {
    if (this.sessions.size >= this.maxSessions) {
      this.hooks.onSessionLimit?.();
      return undefined;
    }
    const route = this.hooks.route();
    // Picked before admission so that an admitted ticket always ends in a session (a pool with
    // hosts always offers one; the schema requires at least one host).
    const host = route.pool.pick(rinfo.address);
    if (host === undefined) return undefined;
    const refused = route.guard.checkLiteral(host.address, host.port);
    if (refused !== undefined) {
      route.pool.markDown(host);
      this.hooks.onOriginError?.(host, refused);
      return undefined;
    }
    const ticket = this.hooks.admit(rinfo.address, rinfo.port);
    if (ticket === undefined) return undefined;
    route.pool.begin(host);
    // A name is resolved by the guard's lookup, which hands the socket only addresses the policy allows.
    // dgram asks for one address (no `all`), which is what the lookup then answers.
    const lookup = route.guard.udpLookup(host.address, host.port) as SocketOptions['lookup'];
    const upstream = createSocket({ type: isIPv6(host.address) ? 'udp6' : 'udp4', lookup });
    const header = route.proxyProtocol
      ? encodeProxyV2(
          { sourceAddress: rinfo.address, sourcePort: rinfo.port, destinationAddress: this.address, destinationPort: this.port },
          'UDP',
        )
      : undefined;
    const session = new UdpSession(key, rinfo, host, ticket, upstream, header, route, performance.now());
    this.sessions.set(key, session);
    upstream.on('message', (reply: Buffer) => {
      session.answered = true;
      session.lastActive = performance.now();
      session.bytesToClient += reply.length;
      this.socket?.send(reply, session.clientPort, session.clientAddress);
    });
    upstream.on('error', (error: Error) => this.onOriginError(session, error));
    upstream.connect(host.port, host.address, (error?: Error) => {
      if (error) return this.onOriginError(session, error);
      session.connected = true;
      const pending = session.pending ?? [];
      session.pending = undefined;
      for (const datagram of pending) this.sendToOrigin(session, datagram);
    });
    this.ensureSweeper(route.sessionIdleMs);
    return session;
  }

  private closeSession(session: UdpSession<Ticket>, reason: UdpSessionResult['reason']): void {
    if (this.sessions.get(session.key) !== session) return;
    this.sessions.delete(session.key);
    session.upstream.removeAllListeners('message');
    session.upstream.on('error', () => {});
    session.upstream.close();
    session.route.pool.end(session.host);
    this.hooks.onSessionClose(session.ticket, {
      host: session.host,
      bytesFromClient: session.bytesFromClient,
      bytesToClient: session.bytesToClient,
      reason,
    });
  }

  /** One timer per relay sweeps idle sessions, at a quarter of the shortest idle time in use. */
  private ensureSweeper(idleMs: number): void {
    const every = Math.max(10, Math.min(1000, Math.floor(idleMs / 4)));
    if (this.sweeper !== undefined && every >= this.sweepEveryMs) return;
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    this.sweepEveryMs = every;
    this.sweeper = setInterval(this.sweep, every);
    this.sweeper.unref();
  }

  private readonly sweep = (): void => {
    const now = performance.now();
    for (const session of this.sessions.values()) {
      if (now - session.lastActive >= session.route.sessionIdleMs) this.closeSession(session, 'IDLE_TIMEOUT');
    }
    if (this.sessions.size === 0 && this.sweeper !== undefined) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  };
}
