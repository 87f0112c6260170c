/**
 * One HTTP proxy (one `httpProxy` traffic configuration) of the data plane: its listeners on the
 * front-end addresses, and the request phases behind them (see `phases/index.ts`).
 *
 * - Plain HTTP/1.1 (no `frontend.certificateId`), or TLS with HTTP/2 and HTTP/1.1 chosen by ALPN.
 *   A plain connection is read by the front end on handles (front/front-end.ts), which serves its
 *   bodiless GET and HEAD requests and hands the rest of the connection to node:http when a head
 *   is anything else; TLS connections go to node:http.
 * - `update` applies a new revision live: with the same front end (addresses, port, TLS or not)
 *   the listeners and open connections stay, the next requests see the new settings, and a new
 *   certificate or client-CA set is served to new connections at once (`setSecureContext`).
 *   A changed front end (another address or port, TLS turned on or off) stops accepting on the old
 *   listeners first (the new one may need the same port), binds the new ones, and lets the old
 *   connections finish for `stopGraceMs`.
 * - Requests already running finish with the settings they started with.
 */
import http from 'node:http';
import http2 from 'node:http2';
import type tls from 'node:tls';
import { createAcmeTlsAlpnServer, isAcmeTlsAlpn } from './tls-alpn-acme.ts';
import { readClientHello } from '../../net/client-hello.ts';
import type net from 'node:net';
import type { Duplex } from 'node:stream';
import { acceptProxyHeaders, proxiedAddressesOf } from '../../net/proxy-header.ts';
import { FloodLimiter, type FloodAdmission, type FloodLimitSettings, type FloodRefusal } from '../limits/flood-limits.ts';
import { unmapIpv4 } from '../../net/ip.ts';
import { sourceKey } from '../../net/source-key.ts';
import { EarlyRefusals } from './early-refusal.ts';
import { HandleFrontEnd } from './front/front-end.ts';
import { type Http2Refusal, Http2SessionGuard } from './http2-guard.ts';
import { RequestCtx, type ClientRequest, type ClientResponse } from './ctx.ts';
import { recordEpisodeUpdate } from './insight-events.ts';
import { resolveLimits, type HttpLimits } from './limits.ts';
import { loggingPhase } from './phases/logging.ts';
import { runRequestPhases } from './pipeline.ts';
import type { RateEpisode } from './rate-limit/limiter.ts';
import { ProxySnapshot } from './snapshot.ts';
import { frontendTlsSettingsKey, frontendTlsOptions, type FrontendTlsOptions } from './tls.ts';
import type { HttpProxyDeps, ResolvedHttpProxy } from './types.ts';
import { isWebSocketUpgrade } from './upstream/upgrade.ts';

/** The connection caps of a proxy: `connectionLimits` over the operator's defaults. */
export const DEFAULT_HTTP_CONNECTION_LIMITS: Readonly<FloodLimitSettings> = Object.freeze({
  maxConnectionsPerSource: 256,
  maxNewConnectionsPerSecondPerSource: 100,
  maxConnections: 10_000,
});

/**
 * Why a connection or an HTTP/2 session was refused or ended before reaching an origin.
 * NODE_BUDGET: the node's edge holds TPS_EDGE_MAX_CONNECTIONS connections already.
 */
type HttpRefusalReason = FloodRefusal | Http2Refusal | 'NODE_BUDGET';

interface ListenerSpec {
  key: string;
  host: string;
  port: number;
  family: 4 | 6;
  secure: boolean;
  reusePort: boolean;
}

type FrontServer = http.Server | http2.Http2SecureServer;

/** Server-level TLS switches Node reads for each new connection (not part of a secure context). */
interface ClientCertSwitches {
  requestCert: boolean;
  rejectUnauthorized: boolean;
}

class Listener {
  readonly spec: ListenerSpec;
  readonly server: FrontServer;
  /** The plain listener's handle front end (front/front-end.ts); node:http has the rest of its connections. */
  private readonly front: HandleFrontEnd | undefined;
  private readonly sockets = new Set<net.Socket>();

  constructor(spec: ListenerSpec, server: FrontServer, front: HandleFrontEnd | undefined) {
    this.spec = spec;
    this.server = server;
    this.front = front;
    server.on('connection', (socket: net.Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
  }

  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      const { host, port, family, reusePort } = this.spec;
      this.server.listen({ host, port, ipv6Only: family === 6, ...(reusePort ? { reusePort } : {}) }, () => {
        this.server.off('error', onError);
        // Later server errors (rare: EMFILE on accept) must not crash the process.
        this.server.on('error', () => {});
        resolve();
      });
    });
  }

  /** Resets the open connections whose peer `matches`; how many. */
  resetWhere(matches: (peer: string) => boolean): number {
    let reset = 0;
    for (const socket of this.sockets) {
      if (socket.destroyed || !matches(unmapIpv4(socket.remoteAddress ?? ''))) continue;
      socket.resetAndDestroy();
      reset++;
    }
    return reset;
  }

  get address(): net.AddressInfo | undefined {
    const address = this.server.address();
    return address !== null && typeof address === 'object' ? address : undefined;
  }

  /** Stops accepting, lets open connections finish for `graceMs`, then cuts them. */
  close(graceMs: number): Promise<void> {
    this.front?.close();
    return new Promise((resolve) => {
      if (!this.server.listening) {
        for (const socket of this.sockets) socket.destroy();
        resolve();
        return;
      }
      const timer = setTimeout(() => {
        for (const socket of this.sockets) socket.destroy();
      }, graceMs);
      timer.unref();
      this.server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      // Http2SecureServer has it too (for its HTTP/1.1 fallback) but its typings do not say so.
      (this.server as http.Server).closeIdleConnections();
    });
  }
}

export class HttpProxy {
  private snapshot: ProxySnapshot;
  private readonly deps: HttpProxyDeps;
  private readonly limits: HttpLimits;
  /** Connection caps, checked on every accepted connection before TLS or HTTP parsing. */
  private readonly admission: FloodAdmission;
  private readonly http2Guard: Http2SessionGuard;
  private listeners: Listener[] = [];
  /** The TLS settings the listeners serve (`frontendTlsSettingsKey`): a change is applied to them live. */
  private tlsSettingsKey: string;
  private started = false;
  private stopped = false;
  /** Answers TLS-ALPN-01 validation connections (made on the first TLS listener when deps ask for it). */
  private acmeTlsServer: tls.Server | undefined;
  /** Connections of blocked sources, answered without the HTTP server (early-refusal.ts). */
  private readonly early: EarlyRefusals;
  /** Takes the early path's refusal count into the metrics. */
  private metricsTimer: NodeJS.Timeout | undefined;
  /** Where the rate limiter sends an attack episode's counters while it lasts: the insight sink. */
  private readonly onEpisodeUpdate = (episode: RateEpisode): void => recordEpisodeUpdate(this.deps, episode);

  constructor(config: ResolvedHttpProxy, deps: HttpProxyDeps) {
    this.deps = deps;
    this.limits = resolveLimits(deps.limits);
    this.snapshot = new ProxySnapshot(config, deps, this.limits, undefined, this.onEpisodeUpdate);
    this.tlsSettingsKey = frontendTlsSettingsKey(config);
    const limits = connectionLimitsOf(config, deps);
    this.admission = deps.connectionLimits?.create?.(config.id, limits) ?? new FloodLimiter(limits);
    this.early = new EarlyRefusals({
      limiter: () => this.snapshot.rateLimiter,
      location: deps.location,
      maxHeaderSize: this.limits.maxHeaderSize,
      keepAliveTimeoutMs: this.limits.keepAliveTimeoutMs,
      headersTimeoutMs: this.limits.headersTimeoutMs,
      onBlockedRefusal:
        deps.onBlockedRefusal === undefined
          ? undefined
          : (key, blockedUntil, requests) => deps.onBlockedRefusal?.(this.snapshot.id, key, blockedUntil, requests),
    });
    this.http2Guard = new Http2SessionGuard(this.limits, {
      onRefused: (reason, details) =>
        this.refused('HTTP/2', reason, {
          remoteAddress: details.remoteAddress,
          streams: details.streams,
          prematureResets: details.premature,
        }),
    });
  }

  /** The configuration in force. */
  get config(): ResolvedHttpProxy {
    return this.snapshot.config;
  }

  /**
   * The early refusal path: connections refused now, those read into its shared buffer and answers
   * written straight to a handle so far, and `closeConnectionsOf(key)` for the connections of one
   * source (its rate-limit key, `sourceKey`).
   */
  get earlyRefusals(): Pick<EarlyRefusals, 'connections' | 'sharedReads' | 'directWrites' | 'closeConnectionsOf'> {
    return this.early;
  }

  /** Addresses actually bound (after `start`). */
  get addresses(): net.AddressInfo[] {
    return this.listeners.map((l) => l.address).filter((a): a is net.AddressInfo => a !== undefined);
  }

  /** Binds the front-end addresses; rejects with the bind error (its `code`: EADDRINUSE, EADDRNOTAVAIL, EACCES...). */
  async start(): Promise<void> {
    if (this.started) throw new Error('HttpProxy already started');
    if (this.stopped) throw new Error('HttpProxy stopped');
    this.started = true;
    const specs = listenerSpecs(this.snapshot.config, this.deps.reusePort === true);
    if (specs.length === 0)
      throw Object.assign(new Error('no front-end address (frontend.ipv4 or frontend.ipv6)'), { code: 'ENOFRONTEND' });
    try {
      for (const spec of specs) await this.bind(spec);
      this.metricsTimer = setInterval(() => this.countEarlyRefusals(), EARLY_REFUSALS_FLUSH_MS);
      this.metricsTimer.unref();
    } catch (err) {
      await Promise.all(this.listeners.map((l) => l.close(0)));
      this.listeners = [];
      this.started = false;
      throw err;
    }
  }

  /** Applies a new revision live (see the module comment); rejects with the bind error of a changed front end. */
  async update(config: ResolvedHttpProxy): Promise<void> {
    if (this.stopped) throw new Error('HttpProxy stopped');
    const previous = this.snapshot;
    const next = new ProxySnapshot(config, this.deps, this.limits, previous, this.onEpisodeUpdate);
    const tlsSettingsKey = frontendTlsSettingsKey(config);
    const tlsOptions = frontendTlsOptions(config);
    this.snapshot = next;
    this.admission.configure(connectionLimitsOf(config, this.deps));
    void previous.retire(next, this.limits.stopGraceMs);
    if (!this.started) {
      this.tlsSettingsKey = tlsSettingsKey;
      return;
    }
    const wanted = listenerSpecs(config, this.deps.reusePort === true);
    const wantedKeys = new Set(wanted.map((s) => s.key));
    const kept: Listener[] = [];
    const draining: Promise<void>[] = [];
    for (const listener of this.listeners) {
      if (wantedKeys.has(listener.spec.key)) kept.push(listener);
      else draining.push(listener.close(this.limits.stopGraceMs));
    }
    if (tlsSettingsKey !== this.tlsSettingsKey && tlsOptions !== undefined) {
      for (const listener of kept) if (listener.spec.secure) applyTls(listener.server as http2.Http2SecureServer, tlsOptions);
    }
    this.tlsSettingsKey = tlsSettingsKey;
    this.listeners = kept;
    const keptKeys = new Set(kept.map((l) => l.spec.key));
    for (const spec of wanted) {
      if (!keptKeys.has(spec.key)) await this.bind(spec);
    }
    void Promise.all(draining);
  }

  /**
   * Resets the open connections (keep-alive, HTTP/2) of a source whose packets the kernel now drops:
   * `source` is its rate-limit key (an IPv6 client by its prefix). Their answers could no longer
   * reach the proxy anyway; a reset frees them now instead of after the idle timeout.
   */
  resetConnectionsOf(source: string): number {
    const prefix = this.deps.rateLimit?.ipv6Prefix;
    // The early refusal path's first: those it took at accept are not in a listener's set, and the
    // ones it took from node:http are in both (destroyed here, a listener skips them).
    let reset = this.early.closeConnectionsOf(source);
    for (const listener of this.listeners) reset += listener.resetWhere((peer) => sourceKey(peer, prefix) === source);
    return reset;
  }

  /** Closes the listeners, lets open requests finish for `stopGraceMs`, then cuts what is left. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    const listeners = this.listeners;
    this.listeners = [];
    clearInterval(this.metricsTimer);
    this.early.stop();
    this.countEarlyRefusals();
    await Promise.all(listeners.map((l) => l.close(this.limits.stopGraceMs)));
    this.http2Guard.stop();
    await this.snapshot.retire(undefined, this.limits.stopGraceMs);
  }

  private async bind(spec: ListenerSpec): Promise<void> {
    const server = spec.secure ? this.createSecureServer() : this.createPlainServer();
    const acmeTlsAlpn = this.deps.acmeTlsAlpn;
    if (spec.secure && acmeTlsAlpn) {
      // Bound to this proxy's tenant: another tenant's pending order gets no answer here.
      this.acmeTlsServer ??= createAcmeTlsAlpnServer({
        alpnChallengeCertificate: (servername) => acmeTlsAlpn.alpnChallengeCertificate(servername, this.snapshot.tenantId),
      });
      dispatchAcmeTlsAlpn(server, this.acmeTlsServer);
    }
    // The caps count the client, so they come after the PROXY header (which names it) and before
    // anything that costs: the TLS handshake, the HTTP parser.
    const front = spec.secure
      ? undefined
      : new HandleFrontEnd({
          ...this.limits,
          serve: this.onRequest,
          onHeadersTimeout: (socket) =>
            this.onClientError(Object.assign(new Error('request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), socket),
        });
    this.admitConnections(server, spec.secure, front);
    // On the wire the PROXY header comes first, before the TLS ClientHello: its reader wraps the rest.
    const clientAddress = this.deps.clientAddress;
    if (clientAddress !== undefined && clientAddress.proxyProtocol !== 'off')
      acceptProxyHeaders(server, clientAddress, { resume: !spec.secure });
    // Last: the listener tracks every connection from its first moment (stop cuts those still reading a header).
    const listener = new Listener(spec, server, front);
    await listener.listen();
    this.listeners.push(listener);
  }

  /**
   * Puts the connection caps in front of the server's connection listeners: a connection over a
   * cap is reset at once (no TLS handshake, no parser), counted and logged. The source is the
   * client a trusted load balancer's PROXY header names, else the peer; a trusted load balancer's
   * connection without a header counts towards the proxy's total only (its requests'
   * X-Forwarded-For name many clients, which the rate limits then count one by one).
   */
  private admitConnections(server: FrontServer, secure: boolean, front: HandleFrontEnd | undefined): void {
    const listeners = server.listeners('connection') as ((socket: net.Socket) => void)[];
    server.removeAllListeners('connection');
    const clientAddress = this.deps.clientAddress;
    const budget = this.deps.nodeBudget;
    server.on('connection', (socket: net.Socket) => {
      const peer = unmapIpv4(socket.remoteAddress ?? '');
      const proxied = proxiedAddressesOf(socket);
      const source = proxied !== undefined ? proxied.sourceAddress : clientAddress?.trusts(peer) ? undefined : peer;
      // The node's budget first: it keeps the descriptors of the API and the other proxies' share.
      if (budget !== undefined && !budget.tryAcquire()) {
        socket.on('error', () => {});
        socket.resetAndDestroy();
        this.refused('HTTP', 'NODE_BUDGET', { source: source ?? peer });
        return;
      }
      const ticket = this.admission.acquire(source);
      if (typeof ticket === 'string') {
        budget?.release();
        socket.on('error', () => {});
        socket.resetAndDestroy();
        this.refused('HTTP', ticket, { source: source ?? peer });
        return;
      }
      socket.once('close', () => {
        this.admission.release(ticket);
        budget?.release();
      });
      const limited = this.rateLimitSourceOf(peer, proxied?.sourceAddress);
      if (limited !== undefined && this.snapshot.rateLimiter?.hasEpisodes === true) {
        const key = sourceKey(limited, this.deps.rateLimit?.ipv6Prefix);
        const episode = this.snapshot.rateLimiter.blockedEpisode(key);
        if (episode !== undefined) {
          // A TLS handshake costs more than the whole refusal: a blocked source gets none.
          if (secure) {
            socket.on('error', () => {});
            socket.resetAndDestroy();
            this.deps.metrics?.connectionRefused?.(this.snapshot.id, 'HTTP', 'RATE_LIMITED');
            if (proxied === undefined) this.deps.onBlockedRefusal?.(this.snapshot.id, key, episode.blockedUntil);
            return;
          }
          this.early.takeOver(socket, key, proxied === undefined, Buffer.alloc(0), episode);
          return;
        }
      }
      const toNodeHttp = (): void => {
        for (const listener of listeners) listener.call(server, socket);
        if (!secure && limited !== undefined) this.refuseBlockedRequests(socket, limited, proxied === undefined);
      };
      if (
        front?.take(socket, {
          beforeHead: () => limited !== undefined && this.blockedNow(limited),
          handOff: (pending) => {
            // node:http's parser reads the handle from now on (it consumes it, its listener above the
            // front end's, which still sees the end and errors); the bytes read already come first.
            toNodeHttp();
            if (pending.length > 0) socket.push(pending);
          },
        }) === true
      )
        return;
      toNodeHttp();
    });
  }

  /**
   * The address the rate limit counts a connection's requests under when the connection alone says
   * it: the socket peer, or the client a PROXY header names; undefined when each request says it
   * (a trusted load balancer's X-Forwarded-For, read by the accept phase): the early path cannot
   * apply there, and the phases refuse those requests.
   */
  private rateLimitSourceOf(peer: string, proxiedSource: string | undefined): string | undefined {
    const clientAddress = this.deps.clientAddress;
    if (clientAddress === undefined) return peer;
    const hop = proxiedSource ?? peer;
    return clientAddress.trusts(hop) ? undefined : hop;
  }

  /**
   * A kept-alive HTTP/1 connection whose source gets blocked: its next request head, when no earlier
   * response is still under way, makes Node's parser give the connection up (as for an upgrade:
   * `onIncoming` answering 2 stops it before any ServerResponse or phase), and the early path
   * answers it and what follows. Relies on Node's HTTP server internals (`socket.parser.onIncoming`,
   * `_httpMessage`), checked here and by a test: without them the phases refuse as before.
   */
  private refuseBlockedRequests(socket: net.Socket, source: string, peer: boolean): void {
    const parser = (socket as SocketWithParser).parser;
    if (parser === null || parser === undefined || typeof parser.onIncoming !== 'function') return;
    const onIncoming = parser.onIncoming;
    let key: string | undefined;
    parser.onIncoming = (req: http.IncomingMessage, keepAlive: boolean): number => {
      const limiter = this.snapshot.rateLimiter;
      // CONNECT is answered 405 by refuseConnect whoever asks; the others of a blocked source go early.
      if (limiter?.hasEpisodes === true && (socket as SocketWithParser)._httpMessage == null && req.method !== 'CONNECT') {
        key ??= sourceKey(source, this.deps.rateLimit?.ipv6Prefix);
        const episode = limiter.refuseBlocked(key, 1);
        if (episode !== undefined) {
          const raw = req.rawHeaders;
          let body = false;
          for (let i = 0; i < raw.length; i += 2) {
            const name = raw[i]!;
            if ((name.length === 14 || name.length === 17) && /^(?:content-length|transfer-encoding)$/i.test(name)) body = true;
          }
          earlyRefused.set(req, {
            key,
            peer,
            episode,
            head: req.method === 'HEAD',
            close: !keepAlive || body,
          });
          // Not in @types/node's IncomingMessage; Node's server reads it once the parser pauses.
          (req as unknown as { upgrade: boolean }).upgrade = true;
          return 2;
        }
      }
      return onIncoming(req, keepAlive);
    };
  }

  /** Adds the requests the early path refused to the proxy's request metrics. */
  private countEarlyRefusals(): void {
    const refused = this.early.takeRefusedCount();
    if (refused > 0) this.deps.metrics?.requestsRefused?.(this.snapshot.id, 'rate-limit', 429, refused);
  }

  /** Counts and logs (rate-limited by the edge's logger) a connection or session refused for `reason`. */
  private refused(protocol: 'HTTP' | 'HTTP/2', reason: HttpRefusalReason, details: object): void {
    const proxyId = this.snapshot.id;
    this.deps.metrics?.connectionRefused?.(proxyId, protocol, reason);
    this.deps.logger?.warn(
      { proxyId, protocol, reason, ...details },
      'http connection refused or ended: over a cap, a deadline or the reset bound',
    );
  }

  private createPlainServer(): http.Server {
    const limits = this.limits;
    const server = http.createServer(
      {
        maxHeaderSize: limits.maxHeaderSize,
        headersTimeout: limits.headersTimeoutMs,
        requestTimeout: limits.requestTimeoutMs,
        keepAliveTimeout: limits.keepAliveTimeoutMs,
        connectionsCheckingInterval: limits.connectionsCheckingIntervalMs,
        noDelay: true,
        // A request without Content-Length or Transfer-Encoding has no body (RFC 9112 6.3); Node then
        // skips the body stream's life cycle, about 2 us per request in bench/http.
        optimizeEmptyRequests: true,
        shouldUpgradeCallback: isWebSocketUpgrade,
      },
      this.onRequest,
    );
    server.on('upgrade', this.onUpgrade);
    server.on('connect', refuseConnect);
    server.on('clientError', this.onClientError);
    // Without a 'timeout' listener Node destroys the idle socket, which is what we want.
    server.timeout = limits.idleTimeoutMs;
    return server;
  }

  private createSecureServer(): http2.Http2SecureServer {
    const limits = this.limits;
    const tlsOptions = frontendTlsOptions(this.snapshot.config)!;
    const http1Options = {
      optimizeEmptyRequests: true,
      maxHeaderSize: limits.maxHeaderSize,
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      connectionsCheckingInterval: limits.connectionsCheckingIntervalMs,
    };
    const server = http2.createSecureServer(
      {
        ...tlsOptions,
        allowHTTP1: true,
        handshakeTimeout: limits.tlsHandshakeTimeoutMs,
        settings: { maxConcurrentStreams: 128, maxHeaderListSize: limits.maxHeaderSize },
        // Node merges these into the HTTP/1.1 fallback's options (storeHTTPOptions); the typings
        // only list some of them.
        http1Options: http1Options as http2.SecureServerOptions['http1Options'],
        ...http1Options,
      },
      this.onRequest,
    );
    // Node's HTTP/1 fallback reads the server's property (Http2SecureServer takes no such option).
    (server as unknown as { shouldUpgradeCallback: typeof isWebSocketUpgrade }).shouldUpgradeCallback = isWebSocketUpgrade;
    server.on('upgrade', this.onUpgrade);
    server.on('connect', refuseConnect);
    server.on('clientError', this.onClientError);
    server.on('session', this.http2Guard.watch);
    // HTTP/2 sessions and HTTP/1 sockets with no traffic for this long are closed.
    server.setTimeout(limits.idleTimeoutMs);
    return server;
  }

  /** Whether the rate limit blocks `source` now (its next request goes to the early path, through node:http's hook). */
  private blockedNow(source: string): boolean {
    const limiter = this.snapshot.rateLimiter;
    return limiter?.hasEpisodes === true && limiter.blockedEpisode(sourceKey(source, this.deps.rateLimit?.ipv6Prefix)) !== undefined;
  }

  private readonly onRequest = (req: ClientRequest, res: ClientResponse): void => {
    const ctx = new RequestCtx(this.snapshot, req, res);
    res.on('close', () => {
      ctx.upstreamExchange?.clientClosed();
      loggingPhase.run(ctx);
    });
    runRequestPhases(ctx);
  };

  /**
   * An HTTP/1 request Node's parser refused: answered as Node does by default (431 for a head over
   * the size limit, 408 past `headersTimeoutMs` / `requestTimeoutMs`, else 400), and the two
   * timeouts counted: they are how slowloris and slow bodies end.
   */
  private readonly onClientError = (error: NodeJS.ErrnoException, socket: Duplex): void => {
    const code = error.code;
    if (code === 'ERR_HTTP_REQUEST_TIMEOUT')
      this.refused('HTTP', 'REQUEST_TIMEOUT', { remoteAddress: (socket as net.Socket).remoteAddress });
    const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (socket.writable && !inFlight?.headersSent) {
      socket.write(
        code === 'HPE_HEADER_OVERFLOW'
          ? 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n'
          : code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW'
            ? 'HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n\r\n'
            : code === 'ERR_HTTP_REQUEST_TIMEOUT'
              ? 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n'
              : 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n',
      );
    }
    socket.destroy(error);
  };

  private readonly onUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer): void => {
    const early = earlyRefused.get(req);
    if (early !== undefined) {
      earlyRefused.delete(req);
      this.early.refuseFirst(socket as net.Socket, early.episode, early, head);
      return;
    }
    // Until the tunnel takes over the socket is ours alone: an error on it must not crash the process.
    socket.on('error', () => socket.destroy());
    // Only WebSocket handshakes come here (shouldUpgradeCallback); should another ever come, it is
    // refused rather than piped.
    if (!isWebSocketUpgrade(req)) {
      socket.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      return;
    }
    runRequestPhases(new RequestCtx(this.snapshot, req, undefined, { socket, head }));
  };
}

/** How often the early path's refusals are added to the metrics. */
const EARLY_REFUSALS_FLUSH_MS = 1_000;

/** What Node's HTTP server keeps on a socket it reads (not public API: see refuseBlockedRequests). */
interface SocketWithParser {
  parser?: { onIncoming?: (req: http.IncomingMessage, keepAlive: boolean) => number } | null;
  _httpMessage?: unknown;
}

/** A request whose head made Node's parser let go of its connection, to be refused by the early path. */
interface EarlyRefusedRequest {
  key: string;
  /** The source is the socket peer: its refusals may escalate it to the kernel. */
  peer: boolean;
  episode: RateEpisode;
  head: boolean;
  close: boolean;
}

const earlyRefused = new WeakMap<http.IncomingMessage, EarlyRefusedRequest>();

function applyTls(server: http2.Http2SecureServer, options: FrontendTlsOptions): void {
  server.setSecureContext(options);
  const switches = server as unknown as ClientCertSwitches;
  switches.requestCert = options.requestCert;
  switches.rejectUnauthorized = options.rejectUnauthorized;
}

/** The proxy's `connectionLimits`, each cap it does not set taken from the operator's defaults. */
function connectionLimitsOf(config: ResolvedHttpProxy, deps: HttpProxyDeps): FloodLimitSettings {
  return { ...DEFAULT_HTTP_CONNECTION_LIMITS, ...deps.connectionLimits?.defaults, ...config.attributes.connectionLimits };
}

function listenerSpecs(config: ResolvedHttpProxy, reusePort: boolean): ListenerSpec[] {
  const { ipv4, ipv6, port } = config.attributes.frontend;
  const secure = config.frontendCertificate !== undefined;
  const specs: ListenerSpec[] = [];
  if (ipv4) specs.push({ key: `${ipv4}|${port}|${secure}`, host: ipv4, port, family: 4, secure, reusePort });
  if (ipv6) specs.push({ key: `[${ipv6}]|${port}|${secure}`, host: ipv6, port, family: 6, secure, reusePort });
  return specs;
}

/**
 * A reverse proxy tunnels nothing: CONNECT gets 405 (as nginx answers it) instead of a silently
 * closed connection, which clients would retry.
 */
function refuseConnect(request: http.IncomingMessage, socket: import('node:stream').Duplex): void {
  socket.on('error', () => {});
  // RFC 9110 9.3.6: the target of CONNECT is host:port; anything else is a malformed request.
  const wellFormed = /^(?:\[[0-9A-Fa-f:.]+\]|[^:/\s]+):\d{1,5}$/.test(request.url ?? '');
  socket.end(
    wellFormed
      ? 'HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
      : 'HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
  );
}

/**
 * Puts a look at the ClientHello in front of a TLS listener: validation connections of the ACME CA
 * (ALPN `acme-tls/1` only) go to the challenge server, all others to the site, which then reads the
 * ClientHello as if nothing had happened (the bytes are put back). The connection listeners the
 * server already has (Node's TLS handshake, our socket tracking) are run in that order afterwards.
 */
function dispatchAcmeTlsAlpn(server: FrontServer, acmeServer: tls.Server): void {
  const listeners = server.listeners('connection') as ((socket: net.Socket) => void)[];
  server.removeAllListeners('connection');
  server.on('connection', (socket: net.Socket) => {
    void readClientHello(socket).then((hello) => {
      if (socket.destroyed) return;
      if (hello && isAcmeTlsAlpn(hello)) acmeServer.emit('connection', socket);
      else for (const listener of listeners) listener.call(server, socket);
    });
  });
}
