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
 * Sessions are bounded (`maxSessions`, each holds a file descriptor). Admission (threat feed, flood
 * caps) is the proxy's business: `admit`.
 *
 * The node's budget. Each session also holds a place in the node's budget of edge connections
 * (`budget`, TPS_EDGE_MAX_CONNECTIONS), as a TCP connection does: its upstream socket is a file
 * descriptor, and without the budget many relays (or one with a large table) fed spoofed sources
 * could take every descriptor of the process from the HTTP proxies and the API. The place is taken
 * with the session and given back once when it ends, whatever ends it; an evicted session hands its
 * place straight to the session that evicted it (see `openSession`).
 *
 * Confirmed and unconfirmed sessions. A session is confirmed once its client has shown that it
 * receives what is sent to it (the reply budget's rule below); until then its source address may be
 * anyone's, so a flood of datagrams from spoofed sources could fill the table and lock real clients
 * out. Unconfirmed sessions therefore have a budget of their own (`maxUnconfirmedSessions`, small):
 * a new session that finds it full, or the whole table full, takes the place of the oldest
 * unconfirmed session (evicted, counted). Confirmed sessions are never evicted for a new one: a
 * client that confirmed keeps its session whatever spoofed sources send. Only when every session
 * is confirmed and the table is full are new clients' datagrams dropped. An evicted client that was
 * real loses little: its next datagram opens a new session (a protocol over UDP copes with a lost
 * datagram), though with a new upstream port.
 *
 * Reply budget (anti-amplification). A UDP source address proves nothing: anyone can send a small
 * datagram "from" a victim, and a tenant's origin that answers big (DNS, NTP, game status, SSDP)
 * would then flood the victim through us. As QUIC does (RFC 9000, section 8.1: at most three times
 * the bytes received until the client's address is validated), a session sends its client at most
 * `replyBudgetFactor` times the bytes it received from it, until the client has shown it receives
 * what is sent to it; a reply that does not fit the budget left is dropped whole (and counted).
 *
 * What "shown it receives" means for UDP in general, where the relay knows nothing of the protocol:
 * the client sent back something only a receiver of the replies could know. A datagram of the client
 * validates the session when it contains 8 bytes in a row that
 *   - appeared in the first 64 bytes of one of the last two replies delivered to it,
 *   - had not been sent by the client itself before (an origin that echoes what it is sent, as DNS
 *     echoes the question, proves nothing), and
 *   - are not a constant-looking run (at least 6 distinct byte values: zero padding, repeated
 *     protocol constants are guessable).
 * This is how UDP protocols with their own address validation work, so they pass the budget after
 * one round trip: QUIC (the client's packets carry the connection ID the server chose), DTLS
 * (HelloVerifyRequest cookie), DNS cookies (RFC 7873), WireGuard cookie replies, game-server
 * challenges. A spoofing sender never sees the replies and cannot guess such bytes. Protocols
 * without it (plain DNS, NTP, syslog) keep the budget for the whole session: their answers must fit
 * `factor` times the requests, which TPS_UDP_REPLY_BUDGET_FACTOR can raise for an edge that relays them.
 * A client whose first 2 KiB were not enough to show it (what it sent is no longer all known) keeps
 * the budget too. Limits of the rule: an origin whose replies a stranger can predict byte for byte
 * (a public DNS answer) can be validated by a sender who knows them.
 */
import { createSocket, type Socket as DatagramSocket, type RemoteInfo, type SocketOptions } from 'node:dgram';
import { isIPv6 } from 'node:net';
import type { HostPool, PooledHost } from '../balance/index.ts';
import { isOriginRefused, type ScopedOriginGuard } from '../../net/origin-guard.ts';
import { encodeProxyV2 } from '../../net/proxy-protocol.ts';
import type { ConnectionBudget } from '../shared-counters/node-connection-budget.ts';

export const DEFAULT_UDP_SESSION_IDLE_MS = 30_000;
export const DEFAULT_MAX_UDP_SESSIONS = 10_000;
/** Sessions whose client has not shown it receives, per relay (see the module comment). */
export const DEFAULT_MAX_UNCONFIRMED_UDP_SESSIONS = 1000;
/** RFC 9000's factor: three times the bytes received, until the client is validated. */
export const DEFAULT_UDP_REPLY_BUDGET_FACTOR = 3;
/** Bytes of a delivered reply kept, and replies kept, to recognise an echo of them. */
const SAMPLE_BYTES = 64;
const SAMPLES = 2;
/** An echo: this many bytes in a row, with at least `ECHO_DISTINCT_BYTES` different values. */
const ECHO_BYTES = 8;
const ECHO_DISTINCT_BYTES = 6;
/** The client's first bytes kept to tell its own bytes from the origin's; past them, no validation. */
const CLIENT_HISTORY_BYTES = 2048;
/** Bytes of a client datagram searched for an echo (a token sits near the start of a packet). */
const ECHO_SEARCH_BYTES = 1500;
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
  /** Bytes sent back per byte received until the client is validated (see the module comment). */
  replyBudgetFactor: number;
}

export interface UdpSessionResult {
  host: PooledHost;
  bytesFromClient: number;
  bytesToClient: number;
  /** EVICTED: an unconfirmed session gave its place to a new one. */
  reason: 'IDLE_TIMEOUT' | 'ORIGIN_ERROR' | 'CLOSED_BY_PROXY' | 'EVICTED';
  clientAddress: string;
  clientPort: number;
  /** From the session's first datagram to its end. */
  durationMs: number;
}

/** Opaque to the relay: whatever `admit` returns is given back to `release`. */
export interface UdpRelayHooks<Ticket> {
  /** First datagram of a would-be session: a ticket admits it, undefined drops the datagram. */
  admit: (clientAddress: string, clientPort: number) => Ticket | undefined;
  /** The route new sessions take (read at each new session). */
  route: () => UdpRoute;
  /** A datagram of a new client was dropped: `maxSessions` sessions exist, every one confirmed. */
  onSessionLimit?: () => void;
  /** A datagram of a new client was dropped: the node's budget is full and this relay has no unconfirmed session to give its place. */
  onNodeBudget?: () => void;
  /** An unconfirmed session was ended to make room for a new one (onSessionClose follows, `EVICTED`). */
  onUnconfirmedEvicted?: () => void;
  /** A reply was dropped: it did not fit the session's reply budget (the client is not validated). */
  onReplyOverBudget?: (details: {
    clientAddress: string;
    clientPort: number;
    bytes: number;
    bytesFromClient: number;
    bytesToClient: number;
  }) => void;
  /** An origin failed, or the origin policy refused it (the datagram that asked for it is dropped). */
  onOriginError?: (host: PooledHost, error: Error) => void;
  /** A session ended; its ticket is handed back. */
  onSessionClose: (ticket: Ticket, result: UdpSessionResult) => void;
}

export interface UdpRelayOptions {
  address: string;
  port: number;
  maxSessions?: number;
  /** Sessions not yet confirmed, at most (capped at maxSessions). Default 1000. */
  maxUnconfirmedSessions?: number;
  reusePort?: boolean;
  /** The node's budget of edge connections, a place per session; absent: none. */
  budget?: ConnectionBudget;
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
  readonly startedAt: number;
  bytesFromClient = 0;
  /** Bytes delivered to the client (dropped replies not counted). */
  bytesToClient = 0;
  /** The client has shown it receives the replies: no reply budget any more. */
  validated = false;
  /** The start of the last replies delivered (for `validated`); undefined once validated. */
  replySamples: Buffer[] | undefined = [];
  /** The client's first bytes (for `validated`); undefined once validated or once it sent more. */
  clientHistory: Buffer | undefined = Buffer.alloc(0);

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
    this.startedAt = now;
  }
}

export class UdpRelay<Ticket> {
  readonly address: string;
  readonly port: number;
  private readonly maxSessions: number;
  private readonly maxUnconfirmedSessions: number;
  private readonly reusePort: boolean;
  private readonly budget: ConnectionBudget | undefined;
  private readonly hooks: UdpRelayHooks<Ticket>;
  private readonly sessions = new Map<string, UdpSession<Ticket>>();
  /** The sessions not confirmed yet, oldest first (a Map keeps insertion order). */
  private readonly unconfirmed = new Map<string, UdpSession<Ticket>>();
  private socket: DatagramSocket | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private sweepEveryMs = 0;

  constructor(options: UdpRelayOptions, hooks: UdpRelayHooks<Ticket>) {
    this.address = options.address;
    this.port = options.port;
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_UDP_SESSIONS;
    this.maxUnconfirmedSessions = Math.min(this.maxSessions, options.maxUnconfirmedSessions ?? DEFAULT_MAX_UNCONFIRMED_UDP_SESSIONS);
    this.reusePort = options.reusePort ?? false;
    this.budget = options.budget;
    this.hooks = hooks;
  }

  get sessionCount(): number {
    return this.sessions.size;
  }

  get unconfirmedSessionCount(): number {
    return this.unconfirmed.size;
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
    if (!session.validated) {
      watchForEcho(session, message);
      if (session.validated) this.unconfirmed.delete(key);
    }
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
    // Room first: the oldest unconfirmed session gives its place when either budget is full; with
    // every session confirmed and the table full, the newcomer is dropped. Evicted only once the
    // newcomer is admitted, so a refused datagram ends no one's session.
    let evict: UdpSession<Ticket> | undefined;
    if (this.unconfirmed.size >= this.maxUnconfirmedSessions || this.sessions.size >= this.maxSessions) {
      evict = this.unconfirmed.values().next().value;
      if (evict === undefined) {
        this.hooks.onSessionLimit?.();
        return undefined;
      }
    }
    // Then room in the node. A session about to be evicted holds a place and hands it to the
    // newcomer directly: given back and taken again, another worker could take it in between, and
    // the eviction would have been for nothing. Otherwise a place is taken now (before admission,
    // as a TCP connection's at accept) and given back if the datagram goes no further. None left:
    // the relay's own rule, the oldest unconfirmed session makes room once the newcomer is
    // admitted. Only this relay's: another proxy's sessions are another tenant's, and a flood on one
    // proxy must not end them; TCP connections and confirmed sessions are never ended for a
    // newcomer. With no unconfirmed session here, the datagram is dropped before admission.
    const budget = this.budget;
    let placeTaken = false;
    if (budget !== undefined && evict === undefined) {
      placeTaken = budget.tryAcquire();
      if (!placeTaken) {
        evict = this.unconfirmed.values().next().value;
        if (evict === undefined) {
          this.hooks.onNodeBudget?.();
          return undefined;
        }
      }
    }
    const admitted = this.admitNewcomer(rinfo);
    if (admitted === undefined) {
      if (placeTaken) budget?.release();
      return undefined;
    }
    const { route, host, ticket } = admitted;
    if (evict !== undefined) {
      this.hooks.onUnconfirmedEvicted?.();
      this.closeSession(evict, 'EVICTED', budget !== undefined);
    }
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
    this.unconfirmed.set(key, session);
    upstream.on('message', (reply: Buffer) => {
      session.answered = true;
      session.lastActive = performance.now();
      if (!session.validated) {
        if (session.bytesToClient + reply.length > session.route.replyBudgetFactor * session.bytesFromClient) {
          this.hooks.onReplyOverBudget?.({
            clientAddress: session.clientAddress,
            clientPort: session.clientPort,
            bytes: reply.length,
            bytesFromClient: session.bytesFromClient,
            bytesToClient: session.bytesToClient,
          });
          return;
        }
        const samples = session.replySamples;
        if (samples !== undefined) {
          // A copy: the reply's buffer belongs to the socket's read.
          samples.push(Buffer.from(reply.subarray(0, SAMPLE_BYTES)));
          if (samples.length > SAMPLES) samples.shift();
        }
      }
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

  /** The route, origin host and ticket of a would-be session; undefined: its datagram is dropped. */
  private admitNewcomer(rinfo: RemoteInfo): { route: UdpRoute; host: PooledHost; ticket: Ticket } | undefined {
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
    return ticket === undefined ? undefined : { route, host, ticket };
  }

  /** Ends a session, once. `placeHandedOn`: its place in the node's budget goes to the session that evicted it. */
  private closeSession(session: UdpSession<Ticket>, reason: UdpSessionResult['reason'], placeHandedOn = false): void {
    if (this.sessions.get(session.key) !== session) return;
    this.sessions.delete(session.key);
    this.unconfirmed.delete(session.key);
    session.upstream.removeAllListeners('message');
    session.upstream.on('error', () => {});
    session.upstream.close();
    if (!placeHandedOn) this.budget?.release();
    session.route.pool.end(session.host);
    this.hooks.onSessionClose(session.ticket, {
      host: session.host,
      bytesFromClient: session.bytesFromClient,
      bytesToClient: session.bytesToClient,
      reason,
      clientAddress: session.clientAddress,
      clientPort: session.clientPort,
      durationMs: performance.now() - session.startedAt,
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

/**
 * Looks for an echo of the replies in a client datagram (see the module comment), before the
 * datagram joins what the client is known to have sent.
 */
function watchForEcho(session: UdpSession<unknown>, message: Buffer): void {
  const history = session.clientHistory;
  if (history === undefined) return;
  const samples = session.replySamples;
  if (samples !== undefined && samples.length > 0) {
    const searched = message.length > ECHO_SEARCH_BYTES ? message.subarray(0, ECHO_SEARCH_BYTES) : message;
    for (const sample of samples) {
      for (let start = 0; start + ECHO_BYTES <= sample.length; start++) {
        const run = sample.subarray(start, start + ECHO_BYTES);
        if (searched.indexOf(run) === -1 || history.indexOf(run) !== -1 || !varied(run)) continue;
        session.validated = true;
        session.replySamples = undefined;
        session.clientHistory = undefined;
        return;
      }
    }
  }
  if (history.length + message.length > CLIENT_HISTORY_BYTES) {
    // What the client sent is no longer all known: an echo could be its own bytes. No validation.
    session.clientHistory = undefined;
    session.replySamples = undefined;
    return;
  }
  session.clientHistory = Buffer.concat([history, message]);
}

/** At least ECHO_DISTINCT_BYTES different byte values: not a guessable constant run. */
function varied(run: Buffer): boolean {
  const seen = new Set<number>();
  for (const byte of run) seen.add(byte);
  return seen.size >= ECHO_DISTINCT_BYTES;
}
