/**
 * The types the HTTP proxy's modules share: what the runtime hands a proxy (its resolved
 * configuration and its dependencies), what a phase answers, the WAF hook's slot, and what a
 * finished request leaves behind (the access-log entry, the metrics). Types only: any module of the
 * proxy may import this file, and it imports no module of the proxy that holds code.
 */
import type { HttpProxyAttributes } from '@tps/model';
import type { InsightSink, MatchedRule } from '@tps/model';
import type { GeoLookup } from '../geo/geo-lookup.ts';
import type { FloodAdmission, FloodLimitSettings, FloodRefusal } from '../limits/flood-limits.ts';
import type { ConnectionBudget } from '../shared-counters/node-connection-budget.ts';
import type { ClientAddressPolicy } from '../../net/client-address.ts';
import type { OriginGuard } from '../../net/origin-guard.ts';
import type { Http2Refusal } from './http2-guard.ts';
import type { TargetRefusal } from './request-target.ts';
import type { HttpLimits } from './limits.ts';
import type { RateLimitPolicy } from './rate-limit/limiter.ts';
import type { RateLimitStore } from '../limits/rate-store.ts';
import type { AppDdosDeps } from './app-ddos/types.ts';

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

/**
 * Why a connection or an HTTP/2 session was refused or ended before reaching an origin.
 * NODE_BUDGET: the node's edge holds TPS_EDGE_MAX_CONNECTIONS connections already.
 */
export type HttpRefusalReason = FloodRefusal | Http2Refusal | 'NODE_BUDGET';

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
  onBlockedRefusal?: (proxyId: string, source: string, blockedUntil: number) => void;
  /** Application-layer DDoS protection (proxies' `appDdos`): operator settings, signing secret, shared tables, metrics. */
  appDdos?: AppDdosDeps;
}

/** Operator settings of the early refusal of WAF budget offenders (src/edge/http/waf/budget-offenders.ts). */
export interface BudgetOffenderSettings {
  /** Overruns of the WAF's inspection budget within the window that start a block; 0: never refused early. */
  readonly overruns: number;
  readonly windowSeconds: number;
  readonly blockSeconds: number;
}

/** A proxy's `waf` attributes, defaults applied. */
export type WafSettings = NonNullable<HttpProxyAttributes['waf']>;

// What the phases answer.

/** The phases that may answer a request themselves (`internal`: a phase that failed). */
export type PhaseName =
  | 'accept'
  | 'request-target'
  | 'acme-challenge'
  | 'geo-fence'
  | 'rate-limit'
  | 'app-ddos'
  | 'waf'
  | 'upstream'
  | 'waf-response'
  | 'internal';

/**
 * Why a request was refused as malformed or ambiguous before any other phase looked at it (the
 * request-target phase): its target (request-target.ts), its Host, or an HTTP/2 field HTTP/1.1 cannot carry.
 */
export type RequestRefusal =
  | TargetRefusal
  | 'DUPLICATE_HOST'
  | 'HOST_MISMATCH'
  | 'CONNECTION_HEADER'
  | 'TE_NOT_TRAILERS'
  | 'CONTENT_LENGTH_MISMATCH';

/** A response the proxy makes itself. */
export interface Answer {
  readonly phase: PhaseName;
  readonly status: number;
  /** Flat list `[name, value, name, value...]`, lower-case names, no framing headers. */
  readonly headers: readonly string[];
  readonly body: string;
  /** Close the client connection afterwards (HTTP/1): the request body was not read and must not be. */
  readonly close?: boolean;
}

export type PhaseOutcome = Answer | undefined;

/**
 * The key authorization for `token` (RFC 8555 section 8.3) while a challenge for `host` (the Host
 * name, port removed) of an order placed by `tenantId` (the proxy's tenant) is pending, else undefined.
 */
export type AcmeChallengeLookup = (token: string, host: string, tenantId: string) => string | undefined | Promise<string | undefined>;

// The WAF hook: the slot a WAF engine plugs into (src/edge/http/waf/waf-hook.ts fills it).

export interface WafRequestHead {
  proxyId: string;
  tenantId: string;
  /** The proxy's `waf` attributes (mode, paranoia level, exclusions...), defaults applied. */
  settings: WafSettings;
  /** The request's support id: put it in the event and it is the one on the block page. */
  supportId: string;
  client: { ip: string; port: number };
  server: { ip: string; port: number };
  method: string;
  /** Request target as received (path and query): what the rules inspect. */
  url: string;
  /** The canonical path (request-target.ts): what the origin is sent, and what exclusions' `pathPrefix` match. */
  path: string;
  httpVersion: '1.0' | '1.1' | '2.0';
  /** `[name, value, ...]` as received; HTTP/2 pseudo-headers left out and `host` added. */
  headers: readonly string[];
}

export interface WafRequestInput extends WafRequestHead {
  /** Up to `requestBodyLimit` bytes of the body; null when the request has none or the limit is 0. */
  body: Buffer | null;
  /** The body goes on beyond `body`. */
  bodyTruncated: boolean;
}

export interface WafResponseInput {
  request: WafRequestHead;
  statusCode: number;
  /** `[name, value, ...]` of the origin's response, lower-case names. */
  headers: readonly string[];
  /** Up to `responseBodyLimit` bytes of a text-like body (text/*, JSON, XML, JavaScript); else null. */
  body: Buffer | null;
  bodyTruncated: boolean;
}

/** What the logging phase turns into a WAF_EVENT (with the final status). */
export interface WafEventDraft {
  action: 'BLOCKED' | 'LOGGED';
  rules: MatchedRule[];
  /** The request body was longer than the WAF inspects: its verdict covers the first part only. */
  bodyTruncated?: boolean;
}

export type WafVerdict =
  | { action: 'continue'; event?: WafEventDraft }
  | {
      action: 'block';
      /** Default 403. */
      status?: number;
      /** Default: the request's support id (`WafRequestHead.supportId`). */
      supportId?: string;
      event?: WafEventDraft;
    };

export interface WafHook {
  /** Body bytes the request side inspects for proxies that do not set `waf.requestBodyLimit`; 0 = head only. */
  readonly requestBodyLimit: number;
  /** A multipart/form-data body (file uploads) may be this long and is inspected whole; default `requestBodyLimit`. */
  readonly multipartBodyLimit?: number;
  /** For proxies that do not set `waf.bodyLimitAction`; default REJECT. */
  readonly bodyLimitAction?: 'REJECT' | 'PROCESS_PARTIAL';
  inspectRequest(input: WafRequestInput): WafVerdict | Promise<WafVerdict>;
  /** Body bytes the response side wants; 0 or absent = head only. */
  readonly responseBodyLimit?: number;
  inspectResponse?(input: WafResponseInput): WafVerdict | Promise<WafVerdict>;
  /** The request is over: forget what the hook keeps for its response (nothing when already done). */
  endExchange?(supportId: string): void;
}

/**
 * Why a hook could not give a verdict: its engine's queue is full, the request ran past its
 * inspection budget, its thread or transaction is gone, or anything else.
 */
export type WafFailureReason = 'overloaded' | 'cost-share' | 'budget' | 'unavailable' | 'error';

// What a finished request leaves behind.

/**
 * Who answered a request: the origin, or the proxy itself because of one of its protections (the
 * WAF: a block, a body over the limit, a request it could not inspect; the rate limit; the
 * application-layer DDoS protection (a challenge, a clearance, a source blocked); geo
 * fencing), an ACME challenge, or an `error` (the origin unreachable or too slow, a request refused
 * as malformed or too large or without a valid client certificate, an internal error). `none`: the
 * client left before any response head.
 */
export type AnsweredBy = 'origin' | 'waf' | 'rate-limit' | 'app-ddos' | 'geo' | 'acme' | 'error' | 'none';

/** The WAF's word on a request: absent when the WAF never saw it (answered before, or no WAF). */
export type WafOutcome = 'PASSED' | 'BLOCKED' | 'LOGGED' | 'UNINSPECTED';

/** One line of the access log (the caller writes it, typically as one JSON object per line). */
export interface AccessLogEntry {
  type: 'http';
  /** ISO 8601 UTC, when the request arrived. */
  time: string;
  proxyId: string;
  tenantId: string;
  revision: number;
  supportId: string;
  requestId: string;
  clientIp: string;
  clientPort: number;
  /** Where the client address came from, when not from the socket: then `peerIp` is the load balancer. */
  clientIpSource?: 'proxy-protocol' | 'x-forwarded-for';
  peerIp?: string;
  serverIp: string;
  serverPort: number;
  country: string;
  protocol: 'HTTP/1.0' | 'HTTP/1.1' | 'HTTP/2';
  tls: boolean;
  /** X-Client-Cert-Verified value when the proxy asks for client certificates. */
  clientCertificate?: string;
  method: string;
  host: string;
  /** Request target as the origin was (or would have been) sent it: canonical path and query. */
  url: string;
  /** The target as received, when it differs from `url`. */
  rawUrl?: string;
  /** Status sent to the client; 0 when the client went away before any response head. */
  status: number;
  answeredBy: AnsweredBy;
  /** What the WAF said; absent when it did not see the request. */
  waf?: WafOutcome;
  /** Rule ids of the WAF's event (BLOCKED, LOGGED). */
  wafRules?: number[];
  /** Request body bytes received from the client. */
  bytesIn: number;
  /** Response body bytes sent to the client. */
  bytesOut: number;
  /** `address:port` of the origin that answered (or was tried last). */
  upstream?: string;
  upstreamAttempts: number;
  upstreamError?: string;
  /** From the request head to the end of the response. */
  durationMs: number;
  /** From the first connection attempt to the origin's response head (or its last failure); absent when no origin was asked. */
  originMs?: number;
  /** Set on a line sampled out of many (TPS_ACCESS_LOG_SAMPLE): the requests like it it stands for. */
  sample?: number;
}

export interface HttpProxyMetrics {
  /**
   * A request ended (answered, proxied or abandoned): how long it took, and how long the origin
   * took to its response head (undefined when no origin was asked).
   */
  requestCompleted?(
    proxyId: string,
    status: number,
    answeredBy: AnsweredBy,
    durationSeconds: number,
    originSeconds: number | undefined,
  ): void;
  /**
   * Requests answered before any per-request object existed (src/edge/http/early-refusal.ts: a
   * blocked source's), `count` since the last call, added up about once a second: counted as
   * `requestCompleted` counts a request, without its duration.
   */
  requestsRefused?(proxyId: string, answeredBy: AnsweredBy, status: number, count: number): void;
  /** One attempt to an origin failed (`reason`: error code such as ECONNREFUSED or UND_ERR_HEADERS_TIMEOUT). */
  upstreamFailed?(proxyId: string, host: string, reason: string): void;
  /**
   * A connection refused by a cap (SOURCE_CONNECTIONS, SOURCE_RATE, GLOBAL_CONNECTIONS), a TLS
   * connection of a source the rate limit blocks (RATE_LIMITED: no handshake for it), a request
   * past its deadline (HEADERS_TIMEOUT, REQUEST_TIMEOUT), or an HTTP/2 session ended (RAPID_RESET).
   */
  connectionRefused?(proxyId: string, protocol: 'HTTP' | 'HTTP/2', reason: string): void;
  /**
   * The WAF gave no verdict on a request or response (`reason`: its engine overloaded, its thread
   * gone, an error); `outcome` is what the proxy's `waf.failMode` did: refused (503) or passed uninspected.
   */
  wafUninspected?(proxyId: string, side: 'request' | 'response', reason: WafFailureReason, outcome: 'refused' | 'passed'): void;
  /** A request refused as malformed or ambiguous (400) before the other phases: its target, Host or HTTP/2 fields. */
  requestRefused?(proxyId: string, protocol: 'HTTP' | 'HTTP/2', reason: RequestRefusal): void;
  /** A request body longer than the WAF inspects: refused (REJECT) or inspected in part (PROCESS_PARTIAL, or LOGGING mode). */
  wafBodyOverLimit?(proxyId: string, action: 'REJECT' | 'PROCESS_PARTIAL'): void;
  /** A request refused uninspected (429) because its client kept running past the WAF's inspection budget. */
  wafBudgetOffenderRefused?(proxyId: string): void;
}
