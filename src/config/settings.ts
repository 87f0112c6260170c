/**
 * Operator settings: flags override TPS_* environment variables, which override defaults.
 * Read and validated once at start; a bad value stops the process with a message naming the variable.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { invalidCidrs } from '../net/client-address.ts';
import { normalizeIp } from '../net/ip.ts';
import { DEFAULT_QUOTAS } from '../store/quotas.ts';
import { invalidResolverServers } from '../net/origin-resolver.ts';
import { parseSinkAddresses, SinkAddressError, type SinkAddress } from '../insight/sinks/sink-address.ts';

export interface Settings {
  /** Folder of the SQLite file and of generated files (master key). */
  dataDir: string;
  /** postgres://... when several nodes share one control plane; absent = SQLite in dataDir. */
  databaseUrl: string | undefined;
  apiListen: { host: string; port: number };
  /** Operators' endpoints (/metrics, /healthz): never on the public API listener. */
  metricsListen: { host: string; port: number };
  /** The service's base address: tokens' audience. Default: the API's own URL. */
  baseUrl: string | undefined;
  /** Address of the token issuer (this process). Default: the API's own URL. */
  authUrl: string | undefined;
  /** Pool of front-end IPs offered to tenants. */
  frontendIps: string[];
  /** Three-letter code of this edge location (the `tpc` of insight events). */
  location: string;
  /** base64 of 32 bytes; encrypts private keys at rest. Absent: generated once into dataDir/master.key. */
  masterKey: string | undefined;
  tokenTtlSeconds: number;
  /** A token request within this many seconds of the last issued token answers that same token. */
  tokenReuseSeconds: number;
  /** API calls per minute per service account before 429. */
  apiRateLimitPerMinute: number;
  logLevel: string;
  /** Run the edge (data plane) inside `tps serve`. */
  edge: boolean;
  /** Identifies this edge node in status reports. */
  nodeId: string;
  /** Proxy worker threads of the edge (default: one per core). */
  edgeWorkers: number;
  /** Threat-intelligence feeds: file paths or http(s) URLs of IP/CIDR lists. */
  threatFeeds: string[];
  threatFeedRefreshSeconds: number;
  /** Extra `CIDR,CC` lines that place addresses in countries before the MMDB is asked. */
  geoOverridesPath: string | undefined;
  /** Another country MMDB instead of the bundled one. */
  geoMmdbPath: string | undefined;
  /** ACME directory of the CA issuing service-issued certificates; undefined: no ACME service ("off"). */
  acmeDirectoryUrl: string | undefined;
  /** Contact e-mail of the ACME account. */
  acmeEmail: string | undefined;
  /** PEM file of extra CA certificates to trust for the ACME directory's HTTPS (a test CA such as Pebble). */
  acmeCaBundle: string | undefined;
  /** How often every CA certificate's CRL is fetched again. */
  crlRefreshSeconds: number;
  /** Service-issued certificate orders a tenant may have PENDING at once (then 409 QUOTA_EXCEEDED). */
  quotaPendingAcmeOrders: number;
  /**
   * How long a PENDING service-issued order claims its names from other tenants (beyond it, only
   * while an attempt runs); an order not issued by then turns FAILED and frees them.
   */
  acmeClaimSeconds: number;
  /** A CRL larger than this is not read (the fetch fails). */
  crlMaxBytes: number;
  /** A CRL fetch (connect, redirects, whole body) that takes longer fails. */
  crlFetchTimeoutSeconds: number;
  /** CRL fetches at a time, all tenants. */
  crlFetches: number;
  /** CRL fetches at a time of one tenant: its slow CRL servers leave the rest to the others. */
  crlFetchesPerTenant: number;
  /**
   * Special-purpose networks (loopback, private, ...) opened for origins and CRL fetches; the
   * service's own listeners stay refused whatever this says (src/net/origin-policy.ts).
   */
  originAllowedNetworks: string[];
  /** DNS servers (`ip`, `ip:port`, `[ipv6]:port`) that resolve origin names; empty = the system resolver. */
  originResolver: string[];
  /** JSON-lines WAF audit log for a SIEM; unset = none. */
  wafAuditLog: string | undefined;
  /** WAF engine threads per edge worker (default: the cores shared out among the edge workers). */
  wafThreads: number;
  /** Requests that may wait for a WAF engine thread, per thread; past it they are shed per client (waf.failMode). */
  wafQueueLength: number;
  /** How long a request's WAF transaction waits for its response; past it the response gets `waf.failMode`. */
  wafExchangeTtlSeconds: number;
  /** A client is refused early (429) after this many WAF budget overruns within the window; 0: never. */
  wafOffenderOverruns: number;
  wafOffenderWindowSeconds: number;
  /** How long such a client is refused. */
  wafOffenderBlockSeconds: number;
  /** The WAF engine: `compiled` (ours, default) or `modsecurity` (the reference). */
  wafEngine: 'modsecurity' | 'compiled';
  /** Request body bytes the WAF inspects: the default of proxies' `waf.requestBodyLimit`. */
  wafRequestBodyLimit: number;
  /** A multipart/form-data body (file uploads) may be this long, inspected whole. */
  wafMultipartBodyLimit: number;
  /** Text-like response body bytes the WAF inspects (0: response headers only). */
  wafResponseBodyLimit: number;
  /** Past the request body limit: refuse (413) or inspect the first part and let the rest through; the default of `waf.bodyLimitAction`. */
  wafBodyLimitAction: 'PROCESS_PARTIAL' | 'REJECT';
  /** Wall time one request's (or response's) inspection may run before it ends and `waf.failMode` applies. */
  wafRequestBudgetMs: number;
  /** Percent of a worker's WAF threads' time one expensive client may use (100: no cap). */
  wafExpensiveClientPercent: number;
  /** Defaults of proxies' `waf.inputLimits` (ModSecurity's recommended values where it has them): arguments. */
  wafArgumentsLimit: number;
  /** Default of `waf.inputLimits.multipartParts`. */
  wafMultipartPartsLimit: number;
  /** Default of `waf.inputLimits.jsonDepth`. */
  wafJsonDepthLimit: number;
  /** Default of `waf.inputLimits.jsonElements`. */
  wafJsonElementsLimit: number;
  /** Default of `waf.inputLimits.xmlDepth`. */
  wafXmlDepthLimit: number;
  /** Default of `waf.inputLimits.valueLength`. */
  wafValueLengthLimit: number;
  /** redis://...: rate-limit counters shared by several edge nodes; unset = shared by this node's workers only. */
  redisUrl: string | undefined;
  /** What rate limits do while the shared counters (Redis) do not answer: count on this node, refuse (503) or let through. */
  rateLimitStoreFailureMode: 'local' | 'closed' | 'open';
  /** How long a rate-limit counter call to Redis may take before the failure mode applies. */
  rateLimitStoreTimeoutMs: number;
  /**
   * CIDRs of load balancers / CDNs in front of the edge: from these peers only, a PROXY header
   * (`listenerProxyProtocol`) and X-Forwarded-For name the client. Empty = the socket peer is the client.
   */
  trustedProxies: string[];
  /** Whether edge listeners read a PROXY protocol header from trusted peers: not at all, when sent, or always. */
  listenerProxyProtocol: 'off' | 'optional' | 'required';
  /**
   * CIDRs of the reverse proxies in front of the API listener (TLS for the API): from these peers
   * only, X-Forwarded-For names the client (portal sign-in throttling, logs). Empty = the socket peer.
   */
  apiTrustedProxies: string[];
  /** Per-tenant quotas: proxies, certificates and CA certificates a tenant may hold (409 QUOTA_EXCEEDED past them). */
  quotaProxies: number;
  quotaCertificates: number;
  quotaCaCertificates: number;
  /**
   * HTTP proxies' connection caps where a proxy sets no `connectionLimits` of its own: open
   * connections per source, new connections per second per source, open connections of the proxy.
   * Counted across the node's workers.
   */
  httpMaxConnectionsPerSource: number;
  httpMaxNewConnectionsPerSecondPerSource: number;
  httpMaxConnections: number;
  /** IPv6 clients are counted per prefix of this length (rate limits, connection caps): one host gets a whole /64. */
  rateLimitIpv6Prefix: number;
  /** Clients each rate-limited proxy keeps counters for, in a share of its own (bounded memory under floods). */
  rateLimitClientsPerProxy: number;
  /** UDP: bytes sent back to a client per byte received from it, until it has shown it receives them. */
  udpReplyBudgetFactor: number;
  /** UDP: sessions per relay whose client has not shown it receives; the oldest gives way to a new one. */
  udpMaxUnconfirmedSessions: number;
  /** Sources still sending while blocked, dropped by nftables: `auto` (when the process may), `nftables` (required) or `off`. */
  kernelBlocking: 'auto' | 'nftables' | 'off';
  /** A blocked source is escalated to the kernel once its refusals exceed this many times a threshold's requests within its period. */
  kernelBlockingEscalationFactor: number;
  /** Blocked sources' repeated requests answered by the native engine (`auto`, when it is built) or always on the JavaScript path. */
  earlyRefusalEngine: 'auto' | 'javascript';
  /** Plain HTTP/1.1 connections: simple GET/HEAD requests served on the handle front end (`handles`), or everything by node:http. */
  http1FrontEnd: 'handles' | 'node';
  /** Portal sign-ins: password hashes (scrypt, 128 MiB each, on the libuv pool) run at once. */
  passwordHashConcurrency: number;
  /** API calls per minute per client IP on routes that need no token or session (token endpoint, sign-in...). */
  apiUnauthenticatedRateLimitPerMinute: number;
  /** API listener: a request head must be whole within this many seconds of its first byte (408 and closed). */
  apiHeadersTimeoutSeconds: number;
  /** API listener: a request, head and body, must be whole within this many seconds (408 and closed); also the longest a connection may stay silent mid-request. */
  apiRequestTimeoutSeconds: number;
  /** API listener: an idle keep-alive connection is closed after this many seconds. */
  apiKeepAliveTimeoutSeconds: number;
  /** API listener: the longest request body (413 past it, before it is read). */
  apiBodyLimit: number;
  /** API listener: connections open at once; past it new ones are closed at accept. */
  apiMaxConnections: number;
  /** API listener: connections open at once from one source (IPv6: per prefix); the reverse proxies of TPS_API_TRUSTED_PROXIES are not capped per source. */
  apiMaxConnectionsPerSource: number;
  /** Operators' listener: connections open at once; past it new ones are closed at accept. */
  metricsMaxConnections: number;
  /**
   * Client connections (HTTP and layer 4 TCP) and UDP sessions the node's edge holds at once, all
   * proxies and workers together; undefined: derived at start from the file-descriptor limit (fd-budget.ts).
   */
  edgeMaxConnections: number | undefined;
  /** Insight events of days older than this are removed. */
  insightRetentionDays: number;
  /** Estimated bytes all stored insight events may hold; past it the oldest go first. */
  insightMaxBytes: number;
  /** The most one tenant's events may hold, in percent of insightMaxBytes. */
  insightTenantSharePercent: number;
  /** WAF events kept whole per proxy, source, matched rule set and minute; the rest are counted into sampled events. */
  insightWholeEventsPerMinute: number;
  /** One JSON line per request and layer 4 connection: `stdout` or a file's absolute path; undefined = no access log. */
  accessLog: string | undefined;
  /** Normal requests (the origin's 1xx-3xx) and connections are written one in this many; the rest always. */
  accessLogSample: number;
  /** Where every stored insight event is also sent: syslog over UDP or TCP, JSON-lines files. */
  eventSinks: SinkAddress[];
  /** Application-layer DDoS protection (proxies' `appDdos`): the operator's defaults and bounds. */
  appDdosFactor: number;
  appDdosMinRate: number;
  appDdosBaselineMinutes: number;
  appDdosQuietSeconds: number;
  appDdosChallengeBits: number;
  appDdosClearanceSeconds: number;
  appDdosMaxUnsolved: number;
  appDdosBlockSeconds: number;
}

export type SettingsInput = Partial<Record<keyof Settings, string | boolean | undefined>>;

export class SettingsError extends Error {}

const ENV: Record<keyof Settings, string> = {
  dataDir: 'TPS_DATA_DIR',
  databaseUrl: 'TPS_DATABASE_URL',
  apiListen: 'TPS_API_LISTEN',
  metricsListen: 'TPS_METRICS_LISTEN',
  baseUrl: 'TPS_BASE_URL',
  authUrl: 'TPS_AUTH_URL',
  frontendIps: 'TPS_FRONTEND_IPS',
  location: 'TPS_LOCATION',
  masterKey: 'TPS_MASTER_KEY',
  tokenTtlSeconds: 'TPS_TOKEN_TTL_SECONDS',
  tokenReuseSeconds: 'TPS_TOKEN_REUSE_SECONDS',
  apiRateLimitPerMinute: 'TPS_API_RATE_LIMIT_PER_MINUTE',
  logLevel: 'TPS_LOG_LEVEL',
  edge: 'TPS_EDGE',
  nodeId: 'TPS_NODE_ID',
  edgeWorkers: 'TPS_EDGE_WORKERS',
  threatFeeds: 'TPS_THREAT_FEEDS',
  threatFeedRefreshSeconds: 'TPS_THREAT_FEED_REFRESH_SECONDS',
  geoOverridesPath: 'TPS_GEO_OVERRIDES',
  geoMmdbPath: 'TPS_GEO_MMDB',
  wafAuditLog: 'TPS_WAF_AUDIT_LOG',
  wafThreads: 'TPS_WAF_THREADS',
  wafQueueLength: 'TPS_WAF_QUEUE_LENGTH',
  wafExchangeTtlSeconds: 'TPS_WAF_EXCHANGE_TTL_SECONDS',
  wafOffenderOverruns: 'TPS_WAF_OFFENDER_OVERRUNS',
  wafOffenderWindowSeconds: 'TPS_WAF_OFFENDER_WINDOW_SECONDS',
  wafOffenderBlockSeconds: 'TPS_WAF_OFFENDER_BLOCK_SECONDS',
  wafEngine: 'TPS_WAF_ENGINE',
  wafRequestBodyLimit: 'TPS_WAF_REQUEST_BODY_LIMIT',
  wafMultipartBodyLimit: 'TPS_WAF_MULTIPART_BODY_LIMIT',
  wafResponseBodyLimit: 'TPS_WAF_RESPONSE_BODY_LIMIT',
  wafBodyLimitAction: 'TPS_WAF_BODY_LIMIT_ACTION',
  wafRequestBudgetMs: 'TPS_WAF_REQUEST_BUDGET_MS',
  wafExpensiveClientPercent: 'TPS_WAF_EXPENSIVE_CLIENT_PERCENT',
  wafArgumentsLimit: 'TPS_WAF_ARGUMENTS_LIMIT',
  wafMultipartPartsLimit: 'TPS_WAF_MULTIPART_PARTS_LIMIT',
  wafJsonDepthLimit: 'TPS_WAF_JSON_DEPTH_LIMIT',
  wafJsonElementsLimit: 'TPS_WAF_JSON_ELEMENTS_LIMIT',
  wafXmlDepthLimit: 'TPS_WAF_XML_DEPTH_LIMIT',
  wafValueLengthLimit: 'TPS_WAF_VALUE_LENGTH_LIMIT',
  redisUrl: 'TPS_REDIS_URL',
  trustedProxies: 'TPS_TRUSTED_PROXIES',
  listenerProxyProtocol: 'TPS_LISTENER_PROXY_PROTOCOL',
  apiTrustedProxies: 'TPS_API_TRUSTED_PROXIES',
  httpMaxConnectionsPerSource: 'TPS_HTTP_MAX_CONNECTIONS_PER_SOURCE',
  httpMaxNewConnectionsPerSecondPerSource: 'TPS_HTTP_MAX_NEW_CONNECTIONS_PER_SECOND_PER_SOURCE',
  httpMaxConnections: 'TPS_HTTP_MAX_CONNECTIONS',
  rateLimitIpv6Prefix: 'TPS_RATE_LIMIT_IPV6_PREFIX',
  rateLimitClientsPerProxy: 'TPS_RATE_LIMIT_CLIENTS_PER_PROXY',
  rateLimitStoreFailureMode: 'TPS_RATE_LIMIT_STORE_FAILURE_MODE',
  rateLimitStoreTimeoutMs: 'TPS_RATE_LIMIT_STORE_TIMEOUT_MS',
  appDdosFactor: 'TPS_APP_DDOS_FACTOR',
  appDdosMinRate: 'TPS_APP_DDOS_MIN_RATE',
  appDdosBaselineMinutes: 'TPS_APP_DDOS_BASELINE_MINUTES',
  appDdosQuietSeconds: 'TPS_APP_DDOS_QUIET_SECONDS',
  appDdosChallengeBits: 'TPS_APP_DDOS_CHALLENGE_BITS',
  appDdosClearanceSeconds: 'TPS_APP_DDOS_CLEARANCE_SECONDS',
  appDdosMaxUnsolved: 'TPS_APP_DDOS_MAX_UNSOLVED',
  appDdosBlockSeconds: 'TPS_APP_DDOS_BLOCK_SECONDS',
  udpReplyBudgetFactor: 'TPS_UDP_REPLY_BUDGET_FACTOR',
  udpMaxUnconfirmedSessions: 'TPS_UDP_MAX_UNCONFIRMED_SESSIONS',
  kernelBlocking: 'TPS_KERNEL_BLOCKING',
  kernelBlockingEscalationFactor: 'TPS_KERNEL_BLOCKING_ESCALATION_FACTOR',
  earlyRefusalEngine: 'TPS_EARLY_REFUSAL_ENGINE',
  http1FrontEnd: 'TPS_HTTP1_FRONT_END',
  passwordHashConcurrency: 'TPS_PASSWORD_HASH_CONCURRENCY',
  apiUnauthenticatedRateLimitPerMinute: 'TPS_API_UNAUTHENTICATED_RATE_LIMIT_PER_MINUTE',
  apiHeadersTimeoutSeconds: 'TPS_API_HEADERS_TIMEOUT_SECONDS',
  apiRequestTimeoutSeconds: 'TPS_API_REQUEST_TIMEOUT_SECONDS',
  apiKeepAliveTimeoutSeconds: 'TPS_API_KEEPALIVE_TIMEOUT_SECONDS',
  apiBodyLimit: 'TPS_API_BODY_LIMIT',
  apiMaxConnections: 'TPS_API_MAX_CONNECTIONS',
  apiMaxConnectionsPerSource: 'TPS_API_MAX_CONNECTIONS_PER_SOURCE',
  metricsMaxConnections: 'TPS_METRICS_MAX_CONNECTIONS',
  edgeMaxConnections: 'TPS_EDGE_MAX_CONNECTIONS',
  acmeDirectoryUrl: 'TPS_ACME_DIRECTORY_URL',
  acmeEmail: 'TPS_ACME_EMAIL',
  acmeCaBundle: 'TPS_ACME_CA_BUNDLE',
  crlRefreshSeconds: 'TPS_CRL_REFRESH_SECONDS',
  quotaPendingAcmeOrders: 'TPS_QUOTA_PENDING_ACME_ORDERS',
  acmeClaimSeconds: 'TPS_ACME_CLAIM_SECONDS',
  quotaProxies: 'TPS_QUOTA_PROXIES',
  quotaCertificates: 'TPS_QUOTA_CERTIFICATES',
  quotaCaCertificates: 'TPS_QUOTA_CA_CERTIFICATES',
  crlMaxBytes: 'TPS_CRL_MAX_BYTES',
  crlFetchTimeoutSeconds: 'TPS_CRL_FETCH_TIMEOUT_SECONDS',
  crlFetches: 'TPS_CRL_FETCHES',
  crlFetchesPerTenant: 'TPS_CRL_FETCHES_PER_TENANT',
  originAllowedNetworks: 'TPS_ORIGIN_ALLOWED_NETWORKS',
  originResolver: 'TPS_ORIGIN_RESOLVER',
  insightRetentionDays: 'TPS_INSIGHT_RETENTION_DAYS',
  insightMaxBytes: 'TPS_INSIGHT_MAX_BYTES',
  insightTenantSharePercent: 'TPS_INSIGHT_TENANT_SHARE_PERCENT',
  insightWholeEventsPerMinute: 'TPS_INSIGHT_WHOLE_EVENTS_PER_MINUTE',
  accessLog: 'TPS_ACCESS_LOG',
  accessLogSample: 'TPS_ACCESS_LOG_SAMPLE',
  eventSinks: 'TPS_EVENT_SINKS',
};

export function loadSettings(flags: SettingsInput = {}, env: NodeJS.ProcessEnv = process.env): Settings {
  const raw = (key: keyof Settings): string | undefined => {
    const flag = flags[key];
    if (flag !== undefined) return String(flag);
    const value = env[ENV[key]];
    return value === undefined || value === '' ? undefined : value;
  };
  const fail = (key: keyof Settings, why: string): never => {
    throw new SettingsError(`${ENV[key]}${WITH_FLAG.has(key) ? ` (--${kebab(key)})` : ''}: ${why}`);
  };
  const integer = (key: keyof Settings, fallback: number, min: number, max: number): number => {
    const value = raw(key);
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) fail(key, `must be an integer from ${min} to ${max}, got "${value}"`);
    return n;
  };
  const url = (key: keyof Settings): string | undefined => {
    const value = raw(key);
    if (value === undefined) return undefined;
    try {
      const parsed = new URL(value);
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error();
    } catch {
      fail(key, `must be an http(s) URL, got "${value}"`);
    }
    return value.replace(/\/+$/, '');
  };

  const existingFile = (key: keyof Settings): string | undefined => {
    const value = raw(key);
    if (value !== undefined && !fs.existsSync(value)) fail(key, `no file at "${value}"`);
    return value === undefined ? undefined : path.resolve(value);
  };

  // ACME: Let's Encrypt production unless set; "off" runs no ACME service (requests stay PENDING).
  const acmeDirectoryUrl =
    raw('acmeDirectoryUrl') === 'off' ? undefined : (url('acmeDirectoryUrl') ?? 'https://acme-v02.api.letsencrypt.org/directory');
  const acmeEmail = raw('acmeEmail');
  if (
    acmeEmail !== undefined &&
    !/^[^\s@<>()",;:]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$/.test(acmeEmail)
  ) {
    fail('acmeEmail', `must be an e-mail address without spaces, got "${acmeEmail}"`);
  }
  const acmeCaBundle = existingFile('acmeCaBundle');
  if (acmeCaBundle !== undefined && !fs.readFileSync(acmeCaBundle, 'utf8').includes('-----BEGIN CERTIFICATE-----')) {
    fail('acmeCaBundle', `"${acmeCaBundle}" holds no PEM certificate`);
  }

  const wafEngine = (): Settings['wafEngine'] => {
    const value = raw('wafEngine') ?? 'compiled';
    if (value !== 'modsecurity' && value !== 'compiled') fail('wafEngine', `must be modsecurity or compiled, got "${value}"`);
    if (value === 'modsecurity' && !packageInstalled('@tps/waf-modsecurity')) {
      fail(
        'wafEngine',
        'modsecurity needs the optional package @tps/waf-modsecurity, which is not installed (bash scripts/setup.sh --modsecurity installs it and builds its addon)',
      );
    }
    return value as Settings['wafEngine'];
  };

  const bodyLimitAction = (): Settings['wafBodyLimitAction'] => {
    const value = raw('wafBodyLimitAction') ?? 'REJECT';
    if (value !== 'PROCESS_PARTIAL' && value !== 'REJECT') fail('wafBodyLimitAction', `must be PROCESS_PARTIAL or REJECT, got "${value}"`);
    return value as Settings['wafBodyLimitAction'];
  };

  const redisUrl = (): string | undefined => {
    const value = raw('redisUrl');
    if (value !== undefined && !/^rediss?:\/\//.test(value)) fail('redisUrl', `must start with redis:// or rediss://, got "${value}"`);
    return value;
  };

  const trustedProxies = (raw('trustedProxies') ?? '')
    .split(',')
    .map((cidr) => cidr.trim())
    .filter(Boolean);
  const invalidProxies = invalidCidrs(trustedProxies);
  if (invalidProxies.length > 0) {
    fail('trustedProxies', `must be a comma list of IPv4/IPv6 addresses or CIDRs, "${invalidProxies.join('", "')}" is not`);
  }
  const apiTrustedProxies = (raw('apiTrustedProxies') ?? '')
    .split(',')
    .map((cidr) => cidr.trim())
    .filter(Boolean);
  const invalidApiProxies = invalidCidrs(apiTrustedProxies);
  if (invalidApiProxies.length > 0) {
    fail('apiTrustedProxies', `must be a comma list of IPv4/IPv6 addresses or CIDRs, "${invalidApiProxies.join('", "')}" is not`);
  }
  const listenerProxyProtocol = raw('listenerProxyProtocol') ?? 'off';
  if (listenerProxyProtocol !== 'off' && listenerProxyProtocol !== 'optional' && listenerProxyProtocol !== 'required') {
    fail('listenerProxyProtocol', `must be off, optional or required, got "${listenerProxyProtocol}"`);
  }
  if (listenerProxyProtocol !== 'off' && trustedProxies.length === 0) {
    // Headers are read from trusted peers only: without any, the setting would silently do nothing.
    fail(
      'listenerProxyProtocol',
      `"${listenerProxyProtocol}" needs ${ENV.trustedProxies}: the load balancers' networks, the only peers whose PROXY headers are read`,
    );
  }

  const list = (key: keyof Settings): string[] =>
    (raw(key) ?? '')
      .split(',')
      .map((entry) => entry.trim())
      .filter(Boolean);
  const originAllowedNetworks = list('originAllowedNetworks');
  const invalidNetworks = invalidCidrs(originAllowedNetworks);
  if (invalidNetworks.length > 0) {
    fail('originAllowedNetworks', `must be a comma list of IPv4/IPv6 addresses or CIDRs, "${invalidNetworks.join('", "')}" is not`);
  }
  const originResolver = list('originResolver');
  const invalidServers = invalidResolverServers(originResolver);
  if (invalidServers.length > 0) {
    fail('originResolver', `must be a comma list of DNS servers as ip, ip:port or [ipv6]:port, "${invalidServers.join('", "')}" is not`);
  }
  // Bytes, or KiB / MiB / GiB with a k, m or g suffix ("512m").
  const bytes = (key: keyof Settings, fallback: number, min: number): number => {
    const value = raw(key);
    if (value === undefined) return fallback;
    const match = /^(\d+)\s*([kmg])?$/i.exec(value.trim());
    const n = match ? Number(match[1]) * 1024 ** ' kmg'.indexOf((match[2] ?? ' ').toLowerCase()) : NaN;
    if (!Number.isSafeInteger(n) || n < min)
      fail(key, `must be a number of bytes of at least ${min} (k, m or g suffix for KiB, MiB, GiB), got "${value}"`);
    return n;
  };

  const databaseUrl = raw('databaseUrl');
  if (databaseUrl !== undefined && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    fail('databaseUrl', 'must start with postgres:// (leave it unset for the embedded SQLite store)');
  }

  const hostPort = (key: 'apiListen' | 'metricsListen', fallback: string): { host: string; port: number } => {
    const value = raw(key) ?? fallback;
    const match = /^\[?([^\]]*?)\]?:(\d+)$/.exec(value);
    const port = Number(match?.[2]);
    if (!match || !net.isIP(match[1] ?? '') || !Number.isInteger(port) || port > 65535) fail(key, `must be ip:port, got "${value}"`);
    return { host: match![1]!, port };
  };
  const apiListen = hostPort('apiListen', '127.0.0.1:8080');
  const metricsListen = hostPort('metricsListen', '127.0.0.1:9464');

  const frontendIps = (raw('frontendIps') ?? '127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5')
    .split(',')
    .map((ip) => ip.trim())
    .filter((ip) => ip !== '');
  for (const ip of frontendIps) if (!net.isIP(ip)) fail('frontendIps', `"${ip}" is not an IP address`);
  // A listener of ours on a front-end IP would share its host with tenants' sites: portal cookies
  // would travel to their origins, and their proxies could be pointed at it. A wildcard address
  // listens on the front-end IPs too.
  const frontendSet = new Set(frontendIps.map(normalizeIp));
  for (const key of ['apiListen', 'metricsListen'] as const) {
    const { host } = key === 'apiListen' ? apiListen : metricsListen;
    if (frontendSet.has(normalizeIp(host)))
      fail(key, `${host} is a front-end IP (${ENV.frontendIps}): bind the service's own listeners to an address tenants are not given`);
    if (normalizeIp(host) === '0.0.0.0' || normalizeIp(host) === '::') {
      fail(key, `${host} listens on every address, the front-end IPs included: give the address of an interface tenants are not given`);
    }
  }

  const location = raw('location') ?? 'LOC';
  if (!/^[A-Z]{3}$/.test(location)) fail('location', `must be three upper-case letters, got "${location}"`);

  const masterKey = raw('masterKey');
  if (masterKey !== undefined && Buffer.from(masterKey, 'base64').length !== 32) {
    fail('masterKey', 'must be the base64 of 32 random bytes (openssl rand -base64 32)');
  }

  const edgeWorkers = integer('edgeWorkers', Math.max(1, os.availableParallelism()), 1, 256);
  // The WAF's threads come from the cores, shared out among the edge workers (each has its own engine).
  const wafThreads = integer('wafThreads', Math.max(1, Math.ceil(os.availableParallelism() / edgeWorkers)), 1, 64);
  const wafRequestBodyLimit = integer('wafRequestBodyLimit', 128 * 1024, 0, 64 * 1024 * 1024);
  const wafMultipartBodyLimit = integer('wafMultipartBodyLimit', 1024 * 1024, 0, 64 * 1024 * 1024);

  const accessLog = (): string | undefined => {
    const value = raw('accessLog');
    if (value === undefined || value === 'off') return undefined;
    if (value === 'stdout') return 'stdout';
    const resolved = path.resolve(value);
    if (fs.existsSync(resolved) && fs.statSync(resolved).isDirectory())
      fail('accessLog', `"${value}" is a folder: give stdout or a file path`);
    return resolved;
  };
  const eventSinks = (): SinkAddress[] => {
    try {
      return parseSinkAddresses(raw('eventSinks') ?? '');
    } catch (error) {
      if (error instanceof SinkAddressError) fail('eventSinks', error.message);
      throw error;
    }
  };

  const apiHeadersTimeoutSeconds = integer('apiHeadersTimeoutSeconds', 20, 1, 3600);
  const apiRequestTimeoutSeconds = integer('apiRequestTimeoutSeconds', 60, 1, 3600);
  // Node checks the head's deadline only while the request's is still running.
  if (apiHeadersTimeoutSeconds > apiRequestTimeoutSeconds) {
    fail('apiHeadersTimeoutSeconds', `must not exceed ${ENV.apiRequestTimeoutSeconds} (${apiRequestTimeoutSeconds})`);
  }
  const apiMaxConnections = integer('apiMaxConnections', 1024, 1, 1_000_000);
  // Unset or `auto`: derived from the file-descriptor limit when the edge starts (src/edge/runtime/fd-budget.ts).
  const edgeMaxConnections =
    (raw('edgeMaxConnections') ?? 'auto') === 'auto' ? undefined : integer('edgeMaxConnections', 1, 1, 100_000_000);
  const rateLimitStoreFailureMode = raw('rateLimitStoreFailureMode') ?? 'local';
  if (rateLimitStoreFailureMode !== 'local' && rateLimitStoreFailureMode !== 'closed' && rateLimitStoreFailureMode !== 'open')
    fail('rateLimitStoreFailureMode', `must be local, closed or open, got "${rateLimitStoreFailureMode}"`);
  const kernelBlocking = raw('kernelBlocking') ?? 'auto';
  if (kernelBlocking !== 'auto' && kernelBlocking !== 'nftables' && kernelBlocking !== 'off')
    fail('kernelBlocking', `must be auto, nftables or off, got "${kernelBlocking}"`);
  const earlyRefusalEngine = raw('earlyRefusalEngine') ?? 'auto';
  if (earlyRefusalEngine !== 'auto' && earlyRefusalEngine !== 'javascript')
    fail('earlyRefusalEngine', `must be auto or javascript, got "${earlyRefusalEngine}"`);
  const http1FrontEnd = raw('http1FrontEnd') ?? 'handles';
  if (http1FrontEnd !== 'handles' && http1FrontEnd !== 'node') fail('http1FrontEnd', `must be handles or node, got "${http1FrontEnd}"`);

  const edge = raw('edge') ?? 'true';
  if (!/^(true|false|1|0|on|off)$/.test(edge)) fail('edge', `must be true or false, got "${edge}"`);

  return {
    dataDir: path.resolve(raw('dataDir') ?? 'data'),
    databaseUrl,
    apiListen,
    metricsListen,
    baseUrl: url('baseUrl'),
    authUrl: url('authUrl'),
    frontendIps: [...new Set(frontendIps)],
    location,
    masterKey,
    tokenTtlSeconds: integer('tokenTtlSeconds', 24 * 3600, 1, 30 * 24 * 3600),
    tokenReuseSeconds: integer('tokenReuseSeconds', 12 * 3600, 0, 30 * 24 * 3600),
    apiRateLimitPerMinute: integer('apiRateLimitPerMinute', 1200, 1, 1_000_000),
    logLevel: raw('logLevel') ?? 'info',
    edge: /^(true|1|on)$/.test(edge),
    nodeId: raw('nodeId') ?? `${os.hostname()}-${process.pid}`,
    edgeWorkers,
    threatFeeds: (raw('threatFeeds') ?? '')
      .split(',')
      .map((source) => source.trim())
      .filter(Boolean),
    threatFeedRefreshSeconds: integer('threatFeedRefreshSeconds', 3600, 10, 7 * 24 * 3600),
    geoOverridesPath: existingFile('geoOverridesPath'),
    geoMmdbPath: existingFile('geoMmdbPath'),
    wafAuditLog: raw('wafAuditLog') === undefined ? undefined : path.resolve(raw('wafAuditLog')!),
    wafThreads,
    wafQueueLength: integer('wafQueueLength', 64, 0, 100_000),
    wafExchangeTtlSeconds: integer('wafExchangeTtlSeconds', 120, 1, 3600),
    wafOffenderOverruns: integer('wafOffenderOverruns', 3, 0, 1000),
    wafOffenderWindowSeconds: integer('wafOffenderWindowSeconds', 10, 1, 3600),
    wafOffenderBlockSeconds: integer('wafOffenderBlockSeconds', 60, 1, 86_400),
    wafEngine: wafEngine(),
    wafRequestBodyLimit,
    wafMultipartBodyLimit,
    wafResponseBodyLimit: integer('wafResponseBodyLimit', 64 * 1024, 0, 64 * 1024 * 1024),
    wafBodyLimitAction: bodyLimitAction(),
    wafRequestBudgetMs: integer('wafRequestBudgetMs', 250, 10, 60_000),
    wafExpensiveClientPercent: integer('wafExpensiveClientPercent', 2, 1, 100),
    wafArgumentsLimit: integer('wafArgumentsLimit', 1000, 1, 100_000),
    wafMultipartPartsLimit: integer('wafMultipartPartsLimit', 1000, 1, 100_000),
    wafJsonDepthLimit: integer('wafJsonDepthLimit', 512, 1, 10_000),
    wafJsonElementsLimit: integer('wafJsonElementsLimit', 10_000, 1, 1_000_000),
    wafXmlDepthLimit: integer('wafXmlDepthLimit', 256, 1, 10_000),
    wafValueLengthLimit: integer('wafValueLengthLimit', 128 * 1024, 1, 64 * 1024 * 1024),
    redisUrl: redisUrl(),
    rateLimitStoreFailureMode: rateLimitStoreFailureMode as Settings['rateLimitStoreFailureMode'],
    rateLimitStoreTimeoutMs: integer('rateLimitStoreTimeoutMs', 250, 1, 60_000),
    trustedProxies,
    listenerProxyProtocol: listenerProxyProtocol as Settings['listenerProxyProtocol'],
    apiTrustedProxies,
    httpMaxConnectionsPerSource: integer('httpMaxConnectionsPerSource', 256, 1, 1_000_000),
    httpMaxNewConnectionsPerSecondPerSource: integer('httpMaxNewConnectionsPerSecondPerSource', 100, 1, 1_000_000),
    httpMaxConnections: integer('httpMaxConnections', 10_000, 1, 10_000_000),
    rateLimitIpv6Prefix: integer('rateLimitIpv6Prefix', 64, 1, 128),
    rateLimitClientsPerProxy: integer('rateLimitClientsPerProxy', 16_384, 64, 4_194_304),
    udpReplyBudgetFactor: integer('udpReplyBudgetFactor', 3, 1, 1000),
    udpMaxUnconfirmedSessions: integer('udpMaxUnconfirmedSessions', 1000, 1, 10_000),
    kernelBlocking: kernelBlocking as Settings['kernelBlocking'],
    kernelBlockingEscalationFactor: integer('kernelBlockingEscalationFactor', 4, 1, 1000),
    earlyRefusalEngine: earlyRefusalEngine as Settings['earlyRefusalEngine'],
    http1FrontEnd: http1FrontEnd as Settings['http1FrontEnd'],
    passwordHashConcurrency: integer('passwordHashConcurrency', 2, 1, 64),
    apiUnauthenticatedRateLimitPerMinute: integer('apiUnauthenticatedRateLimitPerMinute', 300, 1, 1_000_000),
    apiHeadersTimeoutSeconds,
    apiRequestTimeoutSeconds,
    apiKeepAliveTimeoutSeconds: integer('apiKeepAliveTimeoutSeconds', 20, 1, 3600),
    apiBodyLimit: bytes('apiBodyLimit', 1024 * 1024, 1024),
    apiMaxConnections,
    apiMaxConnectionsPerSource: integer('apiMaxConnectionsPerSource', Math.min(128, apiMaxConnections), 1, apiMaxConnections),
    metricsMaxConnections: integer('metricsMaxConnections', 64, 1, 100_000),
    edgeMaxConnections,
    acmeDirectoryUrl,
    acmeEmail,
    acmeCaBundle,
    crlRefreshSeconds: integer('crlRefreshSeconds', 3600, 10, 7 * 24 * 3600),
    quotaPendingAcmeOrders: integer('quotaPendingAcmeOrders', 10, 1, 10_000),
    acmeClaimSeconds: integer('acmeClaimSeconds', 24 * 3600, 1, 30 * 24 * 3600),
    quotaProxies: integer('quotaProxies', DEFAULT_QUOTAS.proxies, 0, 1_000_000),
    quotaCertificates: integer('quotaCertificates', DEFAULT_QUOTAS.certificates, 0, 1_000_000),
    quotaCaCertificates: integer('quotaCaCertificates', DEFAULT_QUOTAS.caCertificates, 0, 1_000_000),
    crlMaxBytes: integer('crlMaxBytes', 1024 * 1024, 1024, 64 * 1024 * 1024),
    crlFetchTimeoutSeconds: integer('crlFetchTimeoutSeconds', 10, 1, 300),
    crlFetches: integer('crlFetches', 16, 1, 256),
    crlFetchesPerTenant: integer('crlFetchesPerTenant', 2, 1, 256),
    originAllowedNetworks,
    originResolver,
    insightRetentionDays: integer('insightRetentionDays', 30, 1, 3650),
    insightMaxBytes: bytes('insightMaxBytes', 1024 ** 3, 1024 ** 2),
    insightTenantSharePercent: integer('insightTenantSharePercent', 50, 1, 100),
    insightWholeEventsPerMinute: integer('insightWholeEventsPerMinute', 10, 1, 1_000_000),
    accessLog: accessLog(),
    accessLogSample: integer('accessLogSample', 1, 1, 1_000_000),
    eventSinks: eventSinks(),
    appDdosFactor: integer('appDdosFactor', 4, 2, 1000),
    appDdosMinRate: integer('appDdosMinRate', 50, 1, 10_000_000),
    appDdosBaselineMinutes: integer('appDdosBaselineMinutes', 10, 1, 1440),
    appDdosQuietSeconds: integer('appDdosQuietSeconds', 60, 1, 3600),
    appDdosChallengeBits: integer('appDdosChallengeBits', 14, 1, 24),
    appDdosClearanceSeconds: integer('appDdosClearanceSeconds', 1800, 60, 86_400),
    appDdosMaxUnsolved: integer('appDdosMaxUnsolved', 20, 1, 100_000),
    appDdosBlockSeconds: integer('appDdosBlockSeconds', 300, 1, 86_400),
  };
}

/**
 * What `tps apply` and `tps export` need: they call the public API as a service account, like any
 * client, so that every change goes through the API's own checks.
 */
export interface ApiClientSettings {
  /** The API's base URL (where /api/v2 and, unless authUrl says otherwise, /oauth/token are). */
  apiUrl: string;
  /** The token issuer's base URL. */
  authUrl: string;
  /** The tokens' audience: the service's base address (TPS_BASE_URL of the service). */
  audience: string;
  clientId: string;
  clientSecret: string;
}

export type ApiClientSettingsInput = Partial<Record<'apiUrl' | 'clientId' | 'clientSecret', string | undefined>>;

/** The environment variable behind each API client setting. */
export const API_CLIENT_ENV = { apiUrl: 'TPS_API_URL', clientId: 'TPS_CLIENT_ID', clientSecret: 'TPS_CLIENT_SECRET' } as const;

/**
 * Flags override TPS_API_URL, TPS_CLIENT_ID and TPS_CLIENT_SECRET. Without an API URL the CLI
 * calls the service on this host (TPS_API_LISTEN, default 127.0.0.1:8080). The audience and the
 * token issuer follow TPS_BASE_URL and TPS_AUTH_URL when set, as they do for the service itself.
 */
export function loadApiClientSettings(flags: ApiClientSettingsInput = {}, env: NodeJS.ProcessEnv = process.env): ApiClientSettings {
  const read = (value: string | undefined) => (value === undefined || value === '' ? undefined : value);
  const fail = (name: string, flag: string | undefined, why: string): never => {
    throw new SettingsError(`${name}${flag ? ` (--${flag})` : ''}: ${why}`);
  };
  const httpUrl = (value: string, name: string, flag?: string): string => {
    try {
      const parsed = new URL(value);
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error();
    } catch {
      fail(name, flag, `must be an http(s) URL, got "${value}"`);
    }
    return value.replace(/\/+$/, '');
  };
  const listen = read(env[ENV.apiListen]);
  const apiUrlValue = read(flags.apiUrl) ?? read(env[API_CLIENT_ENV.apiUrl]);
  const apiUrl =
    apiUrlValue !== undefined ? httpUrl(apiUrlValue, API_CLIENT_ENV.apiUrl, 'api-url') : `http://${listen ?? '127.0.0.1:8080'}`;
  const baseUrl = read(env[ENV.baseUrl]);
  const authUrl = read(env[ENV.authUrl]);
  const clientId = read(flags.clientId) ?? read(env[API_CLIENT_ENV.clientId]);
  const clientSecret = read(flags.clientSecret) ?? read(env[API_CLIENT_ENV.clientSecret]);
  if (clientId === undefined)
    fail(
      API_CLIENT_ENV.clientId,
      'client-id',
      "is required: the client id of one of the tenant's service accounts (tps service-account create)",
    );
  if (clientSecret === undefined) fail(API_CLIENT_ENV.clientSecret, 'client-secret', 'is required: the secret of that service account');
  return {
    apiUrl,
    authUrl: authUrl !== undefined ? httpUrl(authUrl, ENV.authUrl) : apiUrl,
    audience: baseUrl !== undefined ? httpUrl(baseUrl, ENV.baseUrl) : apiUrl,
    clientId: clientId!,
    clientSecret: clientSecret!,
  };
}

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** Settings that `tps serve` / `tps edge` also take as a flag (src/cli/main.ts); the rest are environment only. */
const WITH_FLAG: ReadonlySet<keyof Settings> = new Set<keyof Settings>([
  'dataDir',
  'databaseUrl',
  'apiListen',
  'metricsListen',
  'baseUrl',
  'authUrl',
  'frontendIps',
  'location',
  'trustedProxies',
  'listenerProxyProtocol',
  'apiTrustedProxies',
]);

/** The environment variable behind each setting, for --help texts and docs. */
export const SETTINGS_ENV = ENV;

/** Whether an optional package can be imported here. */
function packageInstalled(name: string): boolean {
  try {
    import.meta.resolve(name);
    return true;
  } catch {
    return false;
  }
}
