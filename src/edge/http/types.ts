/**
 * What the runtime hands an HTTP proxy: its resolved configuration and its dependencies, which the
 * proxy's modules share (http-proxy.ts, the snapshot, the phases through it; the runtime, the
 * tests and the benchmarks build them). The types of the parts live with their owners: the WAF
 * hook in waf/types.ts, the access-log entry in src/edge/access-log/types.ts, the metrics in
 * metrics.ts, what a phase answers in phases/answer.ts. Types only, so any module may import it.
 */
import type { HttpProxyAttributes, InsightSink } from '@tps/model';
import type { GeoLookup } from '../geo/geo-lookup.ts';
import type { FloodAdmission, FloodLimitSettings } from '../limits/flood-limits.ts';
import type { ConnectionBudget } from '../shared-counters/node-connection-budget.ts';
import type { ClientAddressPolicy } from '../../net/client-address.ts';
import type { OriginGuard } from '../../net/origin-guard.ts';
import type { HttpLimits } from './limits.ts';
import type { RateLimitPolicy } from './rate-limit/limiter.ts';
import type { RateLimitStore } from '../limits/rate-store.ts';
import type { AppDdosDeps } from './app-ddos/types.ts';
import type { AccessLogEntry } from '../access-log/types.ts';
import type { HttpProxyMetrics } from './metrics.ts';
import type { BudgetOffenderSettings } from './waf/budget-offenders.ts';
import type { WafHook } from './waf/types.ts';

/** What the runtime resolves from the store for one httpProxy configuration. */
export interface ResolvedHttpProxy {
  id: string;
  tenantId: string;
  revision: number;
  /** Defaults applied. */
  attributes: HttpProxyAttributes;
  /** From `frontend.certificateId`: the leaf followed by its intermediates, and the private key. Absent = plain HTTP. */
  frontendCertificate?: { certificatePem: string; privateKeyPem: string };
  /**
   * From `frontend.clientCertificateVerification`. `crlPems`: the CAs' CRLs fetched so far, only with
   * `verifyCrl`; a CA without one then fails every certificate it issued (see tls.ts).
   */
  clientVerification?: { mode: 'VERIFY_AND_REJECT' | 'VERIFY_AND_FORWARD'; caPems: string[]; verifyCrl: boolean; crlPems: string[] };
  /** From `backend.tlsSettings.clientCertificateId`: what the proxy presents to the origin. */
  originClientCertificate?: { certificatePem: string; privateKeyPem: string };
  /** From `backend.tlsSettings.verifyCertificate` (absent with tlsSettings = NONE). */
  originTrust?: { mode: 'NONE' } | { mode: 'SYSTEM_TRUSTSTORE' } | { mode: 'CUSTOM_TRUSTSTORE'; caPems: string[] };
}

/** pino-compatible: a pino logger (or child) can be passed as is. */
export interface HttpProxyLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface HttpProxyDeps {
  /** Where APP_DDOS_ATTACK and WAF_EVENT events go. */
  insight: InsightSink;
  /** Country of client addresses; share one (`sharedGeoLookup`) between all proxies. */
  geo: GeoLookup;
  /**
   * Where the proxy may connect: every connection to an origin (requests, upgrades) is checked by
   * the origin policy, names once resolved. No default: tests with loopback origins pass a
   * permissive one of their own.
   */
  originGuard: OriginGuard;
  /** Three-letter code of this edge location: `tpc` of events, shown on our pages. */
  location: string;
  logger?: HttpProxyLogger;
  /** Receives one entry per finished request. */
  accessLog?: (entry: AccessLogEntry) => void;
  metrics?: HttpProxyMetrics;
  /** The WAF engine's hook; absent = no WAF phase (and request bodies are never buffered). */
  waf?: WafHook;
  /**
   * Clients refused early for running past the WAF's inspection budget again and again
   * (src/edge/http/waf/budget-offenders.ts): the operator's settings, DEFAULT_BUDGET_OFFENDERS by default.
   */
  wafBudgetOffenders?: Partial<BudgetOffenderSettings>;
  /** Defaults of proxies' `waf.inputLimits` (operator settings TPS_WAF_*_LIMIT); absent: the engine's own. */
  wafInputLimits?: NonNullable<NonNullable<HttpProxyAttributes['waf']>['inputLimits']>;
  /** Pending ACME HTTP-01 challenges; absent = /.well-known/acme-challenge/ goes to the origin. */
  acmeChallenge?: AcmeChallengeLookup;
  /** Node-wide limits (sizes, timeouts); see `DEFAULT_HTTP_LIMITS`. */
  limits?: Partial<HttpLimits>;
  rateLimit?: {
    /** Clients held per proxy by the in-memory counter store. Default 100,000. */
    maxEntries?: number;
    /** Default 60 s. See `RateLimiter`. */
    episodeGapMs?: number;
    /** How often episode updates reach the insight sink. Default 1 s. */
    updateIntervalMs?: number;
    /** A shared counter store (Redis) instead of process memory. */
    createStore?: (policy: RateLimitPolicy, proxyId: string) => RateLimitStore;
    /** IPv6 clients are counted per prefix of this length (src/net/source-key.ts). Default 64. */
    ipv6Prefix?: number;
  };
  /**
   * Connection caps: the operator's defaults (a proxy's `connectionLimits` override them), and the
   * counter they are kept in (the edge passes one shared by its workers). Absent: the defaults of
   * `DEFAULT_HTTP_CONNECTION_LIMITS`, counted in this thread.
   */
  connectionLimits?: {
    defaults?: FloodLimitSettings;
    create?: (proxyId: string, limits: FloodLimitSettings) => FloodAdmission;
  };
  /** How long an origin that refused a connection is skipped. Default 10 s. */
  hostDownForMs?: number;
  /**
   * Bind with SO_REUSEPORT (Linux), so that several worker threads or processes of one edge node can
   * each run this proxy on the same address and port; the kernel spreads new connections among them.
   * Rate-limit counters must then be shared (`rateLimit.createStore`). Default false.
   */
  reusePort?: boolean;
  /**
   * The node's budget of edge connections, shared by every proxy and worker: a connection takes a
   * place at accept (before the proxy's own caps) and gives it back at close; none left: reset,
   * counted as NODE_BUDGET. Absent: no node-wide budget.
   */
  nodeBudget?: ConnectionBudget;
  /**
   * ACME TLS-ALPN-01 (renewal when no proxy answers port 80 any more): a TLS connection that offers
   * only `acme-tls/1` gets the challenge certificate of its SNI name instead of the site, when the
   * proxy's tenant (`tenantId`) has an order pending for that name. Absent = TLS listeners hand
   * every connection to the site.
   */
  acmeTlsAlpn?: {
    alpnChallengeCertificate(servername: string, tenantId: string): Promise<{ certPem: string; keyPem: string } | undefined>;
  };
  /**
   * Load balancers in front of the edge (TPS_TRUSTED_PROXIES, TPS_LISTENER_PROXY_PROTOCOL): from their
   * networks only, listeners read PROXY headers and requests' X-Forwarded-For names the client.
   * Absent = the socket peer is the client.
   */
  clientAddress?: ClientAddressPolicy;
  /**
   * Each request refused because its source is blocked by the rate limit, when the source is the
   * socket peer (kernel blocking can drop its packets): `source` is its rate-limit key. Absent:
   * kernel blocking is off.
   */
  onBlockedRefusal?: (proxyId: string, source: string, blockedUntil: number, requests?: number) => void;
  /** Application-layer DDoS protection (proxies' `appDdos`): operator settings, signing secret, shared tables, metrics. */
  appDdos?: AppDdosDeps;
}

/**
 * The key authorization for `token` (RFC 8555 section 8.3) while a challenge for `host` (the Host
 * name, port removed) of an order placed by `tenantId` (the proxy's tenant) is pending, else undefined.
 */
export type AcmeChallengeLookup = (token: string, host: string, tenantId: string) => string | undefined | Promise<string | undefined>;
