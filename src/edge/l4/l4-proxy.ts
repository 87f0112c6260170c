/**
 * One layer 4 proxy (`l4Proxy` traffic configuration) on the data plane: it binds the front-end
 * addresses for its protocols and passes each admitted client connection (TCP) or session (UDP) to
 * an origin host.
 *
 * Admission, in this order, before a single byte reaches an origin:
 *   0. TCP from a load balancer the operator trusts, with TPS_LISTENER_PROXY_PROTOCOL on: its PROXY
 *      header is read first, and the client it names is the source of the steps below (and of the
 *      PROXY header sent to the origin); a missing (`required`) or malformed header is refused;
 *   1. threat feed (when `threatIntelligence.enabled`): a listed source is refused;
 *   2. flood caps (`connectionLimits`): per-source open connections, per-source new connections
 *      per second, and the proxy's open connections.
 * A refused TCP client gets a reset and no upstream connection is made; a refused UDP datagram is
 * dropped. Every refusal is counted (`L4Metrics.connectionRefused`).
 *
 * `update` applies a changed configuration live. Hosts, delivery method, PROXY protocol and caps
 * change for new connections only; established ones go on. Listeners whose (protocol, address,
 * port) stay are kept; new ones are bound before old ones are released (released first only when
 * the kernel refuses both at once, for example the same port on an overlapping address).
 *
 * One L4Proxy runs in one thread. To use several cores, run one per worker with `reusePort` (the
 * kernel spreads connections, and UDP flows stay with one worker); caps are then per worker.
 */
import type { Server, Socket } from 'node:net';
import type { L4ProxyAttributes } from '@tps/model';
import type { ClientAddressPolicy } from '../../net/client-address.ts';
import { headerReadOptions, readProxyHeader } from '../../net/proxy-header.ts';
import { HostPool, type DeliveryMethod } from '../balance/index.ts';
import type { OriginGuard, ScopedOriginGuard } from '../../net/origin-guard.ts';
import { FloodLimiter, type FloodAdmission, type FloodLimitSettings } from '../limits/flood-limits.ts';
import type { ThreatFeed } from './threat-feed.ts';
import { unmapIpv4 } from '../../net/ip.ts';
import { refusalAnsweredBy, roundMs } from './access-log.ts';
import { DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS, TcpTunnel, listenTcp, type TcpRoute } from './tcp.ts';
import { ACCEPT_NOTE, type AcceptedTcp, acceptHandles, localEndpoint } from './tcp-sides.ts';
import { DEFAULT_MAX_UDP_SESSIONS, DEFAULT_UDP_REPLY_BUDGET_FACTOR, DEFAULT_UDP_SESSION_IDLE_MS, UdpRelay, type UdpRoute } from './udp.ts';
import type { L4AccessLogEntry, L4ConnectionClosed, L4Logger, L4Metrics, L4Protocol, L4RefusalReason } from './types.ts';
import type { ConnectionBudget } from '../shared-counters/node-connection-budget.ts';

export interface L4ProxyOptions {
  /** Traffic configuration id (for logs and metrics labels). */
  id: string;
  /** From src/api/schemas/traffic-config.ts, defaults already applied. */
  attributes: L4ProxyAttributes;
  /** Shared across proxies; consulted only when `attributes.threatIntelligence.enabled`. */
  threatFeed: ThreatFeed;
  /**
   * Where the proxy may connect: every origin connection (TCP) or session (UDP) is checked by the
   * origin policy, names once resolved. No default: tests with loopback origins pass a permissive one.
   */
  originGuard: OriginGuard;
  metrics?: L4Metrics;
  logger?: L4Logger;
  /** TCP: a connection without a byte in either direction for this long is closed. Default 5 min. */
  idleTimeoutMs?: number;
  /** UDP: a session without a datagram in either direction for this long ends. Default 30 s. */
  udpSessionIdleMs?: number;
  /** TCP: a connect to an origin that takes longer fails (and the next host is tried). Default 5 s. */
  connectTimeoutMs?: number;
  /** How long a host that failed a connect is skipped. Default 10 s. */
  hostDownForMs?: number;
  /** UDP sessions per front-end socket (each holds a file descriptor). Default 10,000. */
  maxUdpSessions?: number;
  /** UDP: bytes sent back per byte received until the client is validated (udp.ts). Default 3 (RFC 9000). */
  udpReplyBudgetFactor?: number;
  /** UDP sessions per front-end socket whose client is not validated yet (udp.ts). Default 1000. */
  maxUnconfirmedUdpSessions?: number;
  /** Share the ports with other processes or workers doing the same (SO_REUSEPORT). Default false. */
  reusePort?: boolean;
  /** The flood limiter; default a `FloodLimiter` in this thread's memory (the edge passes a shared one). */
  createFloodAdmission?: (settings: FloodLimitSettings) => FloodAdmission;
  /** Load balancers in front of the edge whose PROXY headers name the client (TCP); absent = none. */
  clientAddress?: ClientAddressPolicy;
  /** The configuration's tenant (access-log lines). */
  tenantId?: string;
  /** Receives one line per TCP connection (admitted or refused) and per UDP session; absent = no access log. */
  accessLog?: (entry: L4AccessLogEntry) => void;
  /** The node's budget of edge connections (TCP connections, UDP sessions), shared by every proxy and worker; absent: none. */
  nodeBudget?: ConnectionBudget;
  /**
   * Each connection (TCP) or first datagram (UDP) refused because its source, the socket peer, is
   * on the threat feed: the kernel-blocking escalation's input. Absent: kernel blocking is off.
   */
  onThreatFeedRefusal?: (proxyId: string, source: string, protocol: L4Protocol) => void;
}

type ListenerKey = string;

interface TcpListener {
  protocol: 'TCP';
  server: Server;
}
interface UdpListener {
  protocol: 'UDP';
  relay: UdpRelay<object>;
}
type Listener = TcpListener | UdpListener;

interface Binding {
  key: ListenerKey;
  protocol: L4Protocol;
  address: string;
  port: number;
}

/** The defaults of the schema, for attributes that come without them (the API applies them first). */
const DEFAULT_LIMITS: FloodLimitSettings = {
  maxConnectionsPerSource: 512,
  maxNewConnectionsPerSecondPerSource: 200,
  maxConnections: 100_000,
};

export class L4Proxy {
  readonly id: string;
  private attributes: L4ProxyAttributes;
  private readonly threatFeed: ThreatFeed;
  private readonly metrics: L4Metrics | undefined;
  private readonly logger: L4Logger | undefined;
  private readonly idleTimeoutMs: number;
  private readonly udpSessionIdleMs: number;
  private readonly connectTimeoutMs: number;
  private readonly maxUdpSessions: number;
  private readonly maxUnconfirmedUdpSessions: number | undefined;
  private readonly udpReplyBudgetFactor: number;
  private readonly reusePort: boolean;
  private readonly limiter: FloodAdmission;
  private readonly clientAddress: ClientAddressPolicy | undefined;
  private readonly originGuard: ScopedOriginGuard;
  private readonly tenantId: string;
  private readonly accessLog: ((entry: L4AccessLogEntry) => void) | undefined;
  private readonly nodeBudget: ConnectionBudget | undefined;
  /** TCP connections of trusted load balancers whose PROXY header is being read. */
  private readonly readingHeaders = new Set<Socket>();
  private pool: HostPool;
  private tcpRoute: TcpRoute;
  private udpRoute: UdpRoute;
  private threatIntelligence: boolean;
  private readonly listeners = new Map<ListenerKey, Listener>();
  private readonly tunnels = new Set<TcpTunnel>();
  private state: 'NEW' | 'RUNNING' | 'STOPPED' = 'NEW';
  /** One timer for the connect and idle timeouts of every TCP connection (see tcp.ts). */
  private timeoutSweep: NodeJS.Timeout | undefined;
  private readonly onThreatFeedRefusal: L4ProxyOptions['onThreatFeedRefusal'];
  /** update/stop run one at a time, in call order. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(options: L4ProxyOptions) {
    this.id = options.id;
    this.attributes = options.attributes;
    this.threatFeed = options.threatFeed;
    this.metrics = options.metrics;
    this.logger = options.logger;
    this.idleTimeoutMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.udpSessionIdleMs = options.udpSessionIdleMs ?? DEFAULT_UDP_SESSION_IDLE_MS;
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.maxUdpSessions = options.maxUdpSessions ?? DEFAULT_MAX_UDP_SESSIONS;
    this.maxUnconfirmedUdpSessions = options.maxUnconfirmedUdpSessions;
    this.udpReplyBudgetFactor = options.udpReplyBudgetFactor ?? DEFAULT_UDP_REPLY_BUDGET_FACTOR;
    this.reusePort = options.reusePort ?? false;
    this.limiter = (options.createFloodAdmission ?? ((settings) => new FloodLimiter(settings)))(limitsOf(options.attributes));
    this.clientAddress = options.clientAddress;
    this.nodeBudget = options.nodeBudget;
    this.originGuard = options.originGuard.for(options.id);
    this.tenantId = options.tenantId ?? '';
    this.accessLog = options.accessLog;
    this.onThreatFeedRefusal = options.onThreatFeedRefusal;
    this.pool = new HostPool(options.attributes.backend.hosts, methodOf(options.attributes), {
      downForMs: options.hostDownForMs,
    });
    this.threatIntelligence = options.attributes.threatIntelligence?.enabled ?? true;
    this.tcpRoute = this.makeTcpRoute(options.attributes);
    this.udpRoute = this.makeUdpRoute(options.attributes);
  }

  /** Open TCP connections plus UDP sessions. */
  get connections(): number {
    let sessions = 0;
    for (const listener of this.listeners.values()) if (listener.protocol === 'UDP') sessions += listener.relay.sessionCount;
    return this.tunnels.size + sessions;
  }

  /** The flood limiter's refusal counts and tracked sources, for diagnostics. */
  get floodLimiter(): Pick<FloodAdmission, 'refused' | 'limits'> {
    return this.limiter;
  }

  /**
   * Binds every front-end address (ipv4 and/or ipv6) for every protocol. On failure, rejects with
   * the bind error (its `code` is the errno: EADDRINUSE, EADDRNOTAVAIL, EACCES...) and releases
   * whatever it had bound.
   */
  start(): Promise<void> {
    return this.serialize(async () => {
      if (this.state !== 'NEW') throw new Error(`L4 proxy ${this.id} was already started`);
      const bound = await this.bindAll(bindingsOf(this.attributes));
      for (const [key, listener] of bound) this.listeners.set(key, listener);
      this.state = 'RUNNING';
      const every = Math.max(10, Math.min(1000, Math.floor(Math.min(this.idleTimeoutMs, this.connectTimeoutMs) / 4)));
      this.timeoutSweep = setInterval(this.sweepTimeouts, every);
      this.timeoutSweep.unref();
    });
  }

  /**
   * Applies changed attributes live (see the module comment). On a bind failure it rejects as
   * `start` does and keeps the previous configuration in force.
   */
  update(attributes: L4ProxyAttributes): Promise<void> {
    return this.serialize(async () => {
      if (this.state === 'STOPPED') throw new Error(`L4 proxy ${this.id} is stopped`);
      const previous = {
        attributes: this.attributes,
        pool: this.pool,
        tcpRoute: this.tcpRoute,
        udpRoute: this.udpRoute,
        threatIntelligence: this.threatIntelligence,
        limits: this.limiter.limits,
      };
      // New connections take the new settings from here on, also on listeners bound below.
      this.attributes = attributes;
      this.pool = this.pool.withHosts(attributes.backend.hosts, methodOf(attributes));
      this.tcpRoute = this.makeTcpRoute(attributes);
      this.udpRoute = this.makeUdpRoute(attributes);
      this.threatIntelligence = attributes.threatIntelligence?.enabled ?? true;
      this.limiter.configure(limitsOf(attributes));
      if (this.state !== 'RUNNING') return;
      try {
        await this.rebind(bindingsOf(attributes));
      } catch (error) {
        this.attributes = previous.attributes;
        this.pool = previous.pool;
        this.tcpRoute = previous.tcpRoute;
        this.udpRoute = previous.udpRoute;
        this.threatIntelligence = previous.threatIntelligence;
        this.limiter.configure(previous.limits);
        throw error;
      }
    });
  }

  /** Releases the ports and closes every established connection and session. */
  stop(): Promise<void> {
    return this.serialize(async () => {
      if (this.state === 'STOPPED') return;
      this.state = 'STOPPED';
      clearInterval(this.timeoutSweep);
      const listeners = [...this.listeners.values()];
      this.listeners.clear();
      for (const tunnel of this.tunnels) tunnel.close();
      for (const socket of this.readingHeaders) socket.destroy();
      this.readingHeaders.clear();
      await Promise.all(listeners.map((listener) => this.closeListener(listener, true)));
    });
  }

  private serialize<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => {});
    return next;
  }

  private makeTcpRoute(attributes: L4ProxyAttributes): TcpRoute {
    const proxyProtocol = attributes.proxyProtocol;
    return {
      pool: this.pool,
      proxyProtocol: proxyProtocol?.enabled === true ? proxyProtocol.version : undefined,
      idleTimeoutMs: this.idleTimeoutMs,
      connectTimeoutMs: this.connectTimeoutMs,
      guard: this.originGuard,
    };
  }

  private makeUdpRoute(attributes: L4ProxyAttributes): UdpRoute {
    return {
      pool: this.pool,
      proxyProtocol: attributes.proxyProtocol?.enabled === true,
      sessionIdleMs: this.udpSessionIdleMs,
      guard: this.originGuard,
      replyBudgetFactor: this.udpReplyBudgetFactor,
    };
  }

  /** Binds new listeners first, then releases those no longer wanted. */
  private async rebind(wanted: Binding[]): Promise<void> {
    const wantedKeys = new Set(wanted.map((binding) => binding.key));
    const missing = wanted.filter((binding) => !this.listeners.has(binding.key));
    const unwanted = [...this.listeners.keys()].filter((key) => !wantedKeys.has(key));
    let bound: Map<ListenerKey, Listener>;
    try {
      bound = await this.bindAll(missing);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE' || unwanted.length === 0) throw error;
      // The new address overlaps one being released (e.g. 127.0.0.2 -> 0.0.0.0 on one port):
      // release first, then bind; if that fails too, take the old ones back.
      const released = unwanted.map((key) => [key, this.listeners.get(key)!] as const);
      for (const [key, listener] of released) {
        this.listeners.delete(key);
        await this.closeListener(listener, false);
      }
      try {
        bound = await this.bindAll(missing);
      } catch (secondError) {
        const restore = released.map(([key]) => bindingOfKey(key));
        const restored = await this.bindAll(restore).catch(() => new Map<ListenerKey, Listener>());
        for (const [key, listener] of restored) this.listeners.set(key, listener);
        throw secondError;
      }
      for (const [key, listener] of bound) this.listeners.set(key, listener);
      return;
    }
    for (const [key, listener] of bound) this.listeners.set(key, listener);
    for (const key of unwanted) {
      const listener = this.listeners.get(key)!;
      this.listeners.delete(key);
      await this.closeListener(listener, false);
    }
  }

  /** Binds all or none: on the first failure, closes what it bound and rejects with that error. */
  private async bindAll(bindings: Binding[]): Promise<Map<ListenerKey, Listener>> {
    const bound = new Map<ListenerKey, Listener>();
    try {
      for (const binding of bindings) bound.set(binding.key, await this.bind(binding));
    } catch (error) {
      await Promise.all([...bound.values()].map((listener) => this.closeListener(listener, true)));
      throw error;
    }
    return bound;
  }

  private async bind(binding: Binding): Promise<Listener> {
    if (binding.protocol === 'TCP') {
      const server = await listenTcp(binding.address, binding.port, this.onTcpConnection, { reusePort: this.reusePort });
      acceptHandles(server, this.onTcpHandle);
      server.on('error', (error: Error) => {
        // Accept errors (EMFILE...) after the bind: the listener stays, the event is logged.
        this.logger?.warn({ proxyId: this.id, address: binding.address, port: binding.port, err: error }, 'l4 TCP listener error');
      });
      return { protocol: 'TCP', server };
    }
    const relay = new UdpRelay<object>(
      {
        address: binding.address,
        port: binding.port,
        maxSessions: this.maxUdpSessions,
        ...(this.maxUnconfirmedUdpSessions !== undefined && { maxUnconfirmedSessions: this.maxUnconfirmedUdpSessions }),
        reusePort: this.reusePort,
        ...(this.nodeBudget !== undefined && { budget: this.nodeBudget }),
      },
      {
        admit: this.admitUdp,
        route: () => this.udpRoute,
        onSessionLimit: () => this.metrics?.connectionRefused(this.id, 'UDP', 'SESSION_LIMIT'),
        onNodeBudget: () => this.metrics?.connectionRefused(this.id, 'UDP', 'NODE_BUDGET'),
        onUnconfirmedEvicted: () => this.metrics?.udpSessionEvicted?.(this.id),
        onReplyOverBudget: (details) => {
          this.metrics?.datagramDropped?.(this.id, 'UDP', 'REPLY_BUDGET');
          this.logger?.warn(
            { proxyId: this.id, ...details },
            'udp reply dropped: over the reply budget of a client that has not shown it receives',
          );
        },
        onOriginError: (host, error) => this.metrics?.originConnectFailed(this.id, 'UDP', host, error),
        onSessionClose: (slot, result) => {
          this.limiter.release(slot);
          this.metrics?.connectionClosed(this.id, 'UDP', { ...result, durationSeconds: result.durationMs / 1000 });
          if (this.accessLog !== undefined) {
            this.log({
              ...this.entryBase('UDP', result.clientAddress, result.clientPort, binding.address, binding.port, result.durationMs),
              answeredBy: 'origin',
              end: result.reason,
              upstream: `${result.host.address}:${result.host.port}`,
              bytesIn: result.bytesFromClient,
              bytesOut: result.bytesToClient,
            });
          }
        },
      },
    );
    await relay.start();
    return { protocol: 'UDP', relay };
  }

  /**
   * Closes a listener. `closeEverything`: its UDP sessions too and wait for the TCP server to be
   * done; otherwise (rebinding) established TCP connections run on, UDP sessions end (their
   * replies left from the front-end socket that is going away).
   */
  private async closeListener(listener: Listener, closeEverything: boolean): Promise<void> {
    if (listener.protocol === 'UDP') {
      await listener.relay.stop();
      return;
    }
    const closed = new Promise<void>((resolve) => listener.server.close(() => resolve()));
    // The listening socket is gone once close() returns; the callback waits for the connections.
    if (closeEverything) await closed;
  }

  /** Gives back the node-budget place of a connection no tunnel has taken (one function for every socket). */
  private readonly releasePlace = (): void => this.nodeBudget?.release();

  /**
   * The hot path, by hand, before net makes a socket (tcp-sides.ts `acceptHandles`): a connection
   * admitted at once (no PROXY header to wait for, not listed, within the budget and the caps)
   * goes to its tunnel as a bare handle: true. Every other one is handed back to net, whose socket
   * takes the path below; a flood cap's refusal (the reason returned) with the verdict given.
   */
  private readonly onTcpHandle = (accepted: AcceptedTcp): true | L4RefusalReason | undefined => {
    const ip = accepted.ip;
    if (this.clientAddress?.readsProxyHeader(ip)) return undefined;
    if (this.threatIntelligence && this.threatFeed.has(ip)) return undefined;
    const budget = this.nodeBudget;
    if (budget !== undefined && !budget.tryAcquire()) return undefined;
    const slot = this.limiter.acquire(ip);
    if (typeof slot === 'string') {
      budget?.release();
      return slot;
    }
    this.openTunnel(accepted, slot, undefined);
    return true;
  };

  /**
   * The socket path (PROXY-header peers, listed sources, refusals; every connection where the
   * fast path is off): one trie walk, one map lookup, then the tunnel.
   */
  private readonly onTcpConnection = (socket: Socket): void => {
    // A flood cap's verdict, given before the socket was made (`onTcpHandle`).
    const refusal = (socket as Socket & { [ACCEPT_NOTE]?: L4RefusalReason })[ACCEPT_NOTE];
    if (refusal !== undefined) {
      this.refuseTcp(socket, refusal);
      return;
    }
    const ip = socket.remoteAddress;
    if (ip === undefined) {
      socket.destroy(); // already gone
      return;
    }
    // The node's budget first, before a PROXY header is waited for: every open socket holds a place.
    // Until a tunnel takes the connection, its close gives the place back; then the tunnel's end does.
    const budget = this.nodeBudget;
    if (budget !== undefined) {
      if (!budget.tryAcquire()) {
        this.refuseTcp(socket, 'NODE_BUDGET');
        return;
      }
      socket.once('close', this.releasePlace);
    }
    if (this.clientAddress?.readsProxyHeader(ip)) {
      this.readClientFromHeader(socket, this.clientAddress);
      return;
    }
    this.admitTcp(socket, ip, undefined);
  };

  private admitTcp(socket: Socket, ip: string, proxied: { ip: string; port: number } | undefined): void {
    if (this.threatIntelligence && this.threatFeed.has(ip)) {
      // A source a load balancer names is not the peer the kernel sees: only peers are escalated.
      if (proxied === undefined) this.onThreatFeedRefusal?.(this.id, ip, 'TCP');
      this.refuseTcp(socket, 'THREAT_FEED', proxied);
      return;
    }
    const slot = this.limiter.acquire(ip);
    if (typeof slot === 'string') {
      this.refuseTcp(socket, slot, proxied);
      return;
    }
    if (this.nodeBudget !== undefined) socket.off('close', this.releasePlace);
    this.openTunnel(socket, slot, proxied);
  }

  /** An admitted connection (its node-budget place and flood-cap slot taken) to its tunnel. */
  private openTunnel(client: Socket | AcceptedTcp, slot: object, proxied: { ip: string; port: number } | undefined): void {
    // Read now (a closed socket has no addresses), and only for the access log: each is a system
    // call, a measurable share of a short connection's cost (bench/l4, connections per second).
    const addresses = this.accessLog === undefined ? undefined : clientAddresses(client);
    const budget = this.nodeBudget;
    this.metrics?.connectionAccepted(this.id, 'TCP');
    const tunnel: TcpTunnel = new TcpTunnel(
      client,
      this.tcpRoute,
      {
        onConnectFailure: (host, error) => this.metrics?.originConnectFailed(this.id, 'TCP', host, error),
        onClose: (result) => {
          this.tunnels.delete(tunnel);
          this.limiter.release(slot);
          budget?.release();
          this.metrics?.connectionClosed(this.id, 'TCP', { ...result, durationSeconds: result.durationMs / 1000 });
          if (addresses !== undefined) {
            const entry = this.tcpEntry(addresses, proxied, result.durationMs, {
              answeredBy: result.reason === 'NO_HOST' ? 'error' : 'origin',
              end: result.reason,
              bytesIn: result.bytesFromClient,
              bytesOut: result.bytesToClient,
            });
            if (result.host !== undefined) entry.upstream = `${result.host.address}:${result.host.port}`;
            if (result.connectMs !== undefined) entry.originMs = roundMs(result.connectMs);
            this.log(entry);
          }
        },
      },
      proxied,
    );
    this.tunnels.add(tunnel);
  }

  /**
   * A trusted load balancer's connection: its PROXY header first, then admission of the client it
   * names (threat feed and flood caps count the client, not the load balancer). A header without
   * addresses (LOCAL, UNKNOWN) or none at all (`optional`) leaves the load balancer as the source.
   */
  private readClientFromHeader(socket: Socket, policy: ClientAddressPolicy): void {
    const peer = socket.remoteAddress!;
    this.readingHeaders.add(socket);
    socket.on('error', ignore);
    void readProxyHeader(socket, headerReadOptions(policy)).then((outcome) => {
      this.readingHeaders.delete(socket);
      socket.off('error', ignore);
      if (this.state !== 'RUNNING' || socket.destroyed || (outcome.kind === 'refused' && outcome.reason === 'CLOSED')) {
        socket.destroy();
        return;
      }
      if (outcome.kind === 'refused') {
        this.refuseTcp(socket, 'PROXY_HEADER');
        return;
      }
      const addresses = outcome.kind === 'header' ? outcome.addresses : undefined;
      if (addresses === undefined) this.admitTcp(socket, peer, undefined);
      else this.admitTcp(socket, addresses.sourceAddress, { ip: addresses.sourceAddress, port: addresses.sourcePort });
    });
  }

  private readonly sweepTimeouts = (): void => {
    const now = performance.now();
    for (const tunnel of this.tunnels) tunnel.checkTimeouts(now);
  };

  private refuseTcp(socket: Socket, reason: L4RefusalReason, proxied?: { ip: string; port: number }): void {
    if (this.accessLog !== undefined) {
      this.log(
        this.tcpEntry(socketAddresses(socket), proxied, 0, {
          answeredBy: refusalAnsweredBy(reason),
          refused: reason,
          bytesIn: 0,
          bytesOut: 0,
        }),
      );
    }
    socket.on('error', ignore);
    // A reset: the client learns at once, and no FIN handshake lingers on a flood.
    socket.resetAndDestroy();
    this.metrics?.connectionRefused(this.id, 'TCP', reason);
  }

  /**
   * A TCP connection's line: `fields` after the addresses, the client being the one a trusted load
   * balancer's PROXY header named (`proxied`, then the load balancer is `peerIp`) or else the peer.
   */
  private tcpEntry(addresses: SocketAddresses, proxied: Endpoint | undefined, durationMs: number, fields: TcpLineFields): L4AccessLogEntry {
    const { peer, server } = addresses;
    const client = proxied ?? peer;
    const entry: L4AccessLogEntry = { ...this.entryBase('TCP', client.ip, client.port, server.ip, server.port, durationMs), ...fields };
    if (proxied !== undefined) {
      entry.clientIpSource = 'proxy-protocol';
      entry.peerIp = unmapIpv4(peer.ip);
    }
    return entry;
  }

  /** The fields every line has; `durationMs` ago is when the connection was accepted. */
  private entryBase(protocol: L4Protocol, clientIp: string, clientPort: number, serverIp: string, serverPort: number, durationMs: number) {
    return {
      type: 'l4' as const,
      time: new Date(Date.now() - durationMs).toISOString(),
      proxyId: this.id,
      tenantId: this.tenantId,
      protocol,
      clientIp: unmapIpv4(clientIp),
      clientPort,
      serverIp: unmapIpv4(serverIp),
      serverPort,
      durationMs: roundMs(durationMs),
    };
  }

  private log(entry: L4AccessLogEntry): void {
    try {
      this.accessLog?.(entry);
    } catch (error) {
      this.logger?.warn({ proxyId: this.id, err: error }, 'access log failed');
    }
  }

  private readonly admitUdp = (clientAddress: string): object | undefined => {
    if (this.threatIntelligence && this.threatFeed.has(clientAddress)) {
      this.onThreatFeedRefusal?.(this.id, clientAddress, 'UDP');
      this.metrics?.connectionRefused(this.id, 'UDP', 'THREAT_FEED');
      return undefined;
    }
    const slot = this.limiter.acquire(clientAddress);
    if (typeof slot === 'string') {
      this.metrics?.connectionRefused(this.id, 'UDP', slot);
      return undefined;
    }
    this.metrics?.connectionAccepted(this.id, 'UDP');
    return slot;
  };
}

/** In-memory counters: an `L4Metrics` for tests, tools, and as the reference of what is counted. */
export class L4Counters implements L4Metrics {
  accepted: Record<L4Protocol, number> = { TCP: 0, UDP: 0 };
  refused: Record<L4Protocol, Partial<Record<L4RefusalReason, number>>> = { TCP: {}, UDP: {} };
  closed: Record<L4Protocol, Partial<Record<L4ConnectionClosed['reason'], number>>> = { TCP: {}, UDP: {} };
  bytesFromClients: Record<L4Protocol, number> = { TCP: 0, UDP: 0 };
  bytesToClients: Record<L4Protocol, number> = { TCP: 0, UDP: 0 };
  originConnectFailures: Record<L4Protocol, number> = { TCP: 0, UDP: 0 };

  connectionAccepted(_proxyId: string, protocol: L4Protocol): void {
    this.accepted[protocol]++;
  }
  connectionRefused(_proxyId: string, protocol: L4Protocol, reason: L4RefusalReason): void {
    this.refused[protocol][reason] = (this.refused[protocol][reason] ?? 0) + 1;
  }
  connectionClosed(_proxyId: string, protocol: L4Protocol, closed: L4ConnectionClosed): void {
    this.closed[protocol][closed.reason] = (this.closed[protocol][closed.reason] ?? 0) + 1;
    this.bytesFromClients[protocol] += closed.bytesFromClient;
    this.bytesToClients[protocol] += closed.bytesToClient;
  }
  originConnectFailed(_proxyId: string, protocol: L4Protocol): void {
    this.originConnectFailures[protocol]++;
  }
  repliesDropped: Record<L4Protocol, number> = { TCP: 0, UDP: 0 };
  datagramDropped(_proxyId: string, protocol: L4Protocol): void {
    this.repliesDropped[protocol]++;
  }
  udpSessionsEvicted = 0;
  udpSessionEvicted(): void {
    this.udpSessionsEvicted++;
  }
}

function methodOf(attributes: L4ProxyAttributes): DeliveryMethod {
  return attributes.backend.deliveryMethod ?? 'LEAST_CONNECTIONS';
}

function limitsOf(attributes: L4ProxyAttributes): FloodLimitSettings {
  return { ...DEFAULT_LIMITS, ...attributes.connectionLimits };
}

function bindingsOf(attributes: L4ProxyAttributes): Binding[] {
  const { ipv4, ipv6, port } = attributes.frontend;
  const protocols: L4Protocol[] = attributes.protocols.length > 0 ? attributes.protocols : ['TCP'];
  const addresses = [ipv4, ipv6].filter((address): address is string => address !== undefined && address !== '');
  if (addresses.length === 0) throw Object.assign(new Error('frontend has neither ipv4 nor ipv6'), { code: 'EINVAL' });
  const bindings: Binding[] = [];
  for (const protocol of protocols) {
    for (const address of addresses) bindings.push({ key: `${protocol} ${address} ${port}`, protocol, address, port });
  }
  return bindings;
}

function bindingOfKey(key: ListenerKey): Binding {
  const [protocol, address, port] = key.split(' ') as [L4Protocol, string, string];
  return { key, protocol, address, port: Number(port) };
}

function ignore(): void {}

interface Endpoint {
  ip: string;
  port: number;
}

/** A connected socket's two ends, as the access log names them. */
interface SocketAddresses {
  peer: Endpoint;
  server: Endpoint;
}

/** What a TCP line says besides its addresses. */
type TcpLineFields = Pick<L4AccessLogEntry, 'answeredBy' | 'bytesIn' | 'bytesOut'> & Partial<Pick<L4AccessLogEntry, 'end' | 'refused'>>;

function clientAddresses(client: Socket | AcceptedTcp): SocketAddresses {
  if (!('handle' in client)) return socketAddresses(client);
  const local = localEndpoint(client);
  return { peer: { ip: client.ip, port: client.port }, server: { ip: local.address, port: local.port } };
}

function socketAddresses(socket: Socket): SocketAddresses {
  return {
    peer: { ip: socket.remoteAddress ?? '', port: socket.remotePort ?? 0 },
    server: { ip: socket.localAddress ?? '', port: socket.localPort ?? 0 },
  };
}
