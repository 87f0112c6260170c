/**
 * A proxy worker: one thread that serves every configuration of the edge node. Each worker binds
 * the same front-end ports with SO_REUSEPORT, so the kernel spreads connections over the workers,
 * and a worker that dies takes none of the others with it: the supervisor starts it again.
 *
 * The worker applies whole snapshots: a configuration whose version did not change is left alone
 * (its listeners and connections untouched), a changed one is updated live, a missing one stopped.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { L4Proxy } from '../l4/l4-proxy.ts';
import type { L4Metrics } from '../l4/types.ts';
import { ThreatFeed } from '../l4/threat-feed.ts';
import { HttpProxy } from '../http/http-proxy.ts';
import type { BudgetOffenderSettings } from '../http/waf/budget-offenders.ts';
import type { HttpProxyDeps } from '../http/types.ts';
import { sharedGeoLookup } from '../geo/geo-lookup.ts';
import type { InsightSink } from '@tps/model';
import { InsightSampler } from '../../insight/sampler.ts';
import { SharedTable } from '../shared-counters/shared-table.ts';
import type { ProxyCounterTables } from '../shared-counters/proxy-tables.ts';
import type { FloodLimitSettings } from '../limits/flood-limits.ts';
import { sourceKey } from '../../net/source-key.ts';
import { SharedRateLimitStore } from '../shared-counters/shared-rate-store.ts';
import { SharedFloodLimiter } from '../shared-counters/shared-flood-limiter.ts';
import { NodeConnectionBudget } from '../shared-counters/node-connection-budget.ts';
import { RedisRateLimitStore } from '../shared-counters/redis-rate-store.ts';
import { RedisClusterRate } from '../shared-counters/redis-app-ddos.ts';
import { Redis } from 'ioredis';
import { FailoverRateLimitStore, StoreCircuit } from '../limits/store-failover.ts';
import type { RateLimitStoreSettings } from '../limits/types.ts';
import { createWafHook } from '../http/waf/waf-hook.ts';
import { WafAuditLog } from '../http/waf/audit-log.ts';
import { startWafEngine as startEngine } from '../http/waf/engines.ts';
import type { ExchangingEngine } from '../http/waf/engines.ts';
import { defaultRunawayMs } from '@tps/waf';
import type { WafEngine, WafInputLimits } from '@tps/waf';
import { MAX_WAF_REQUEST_BODY_LIMIT } from '@tps/model';
import { ClientAddressPolicy } from '../../net/client-address.ts';
import type { ClientAddressSettings } from '../../net/types.ts';
import { OriginPolicy, type OriginPolicySettings } from '../../net/origin-policy.ts';
import { OriginGuard } from '../../net/origin-guard.ts';
import { createOriginResolver } from '../../net/origin-resolver.ts';
import type { ConfigEntry, CounterIncrement, FromWorker, ToWorker, WafBodyLimits } from './messages.ts';
import type { EdgeCounterName } from './metric-catalogue.ts';
import type { ThreatFeedSet } from './threat-feed-host.ts';
import { createWorkerLogger } from './worker-logger.ts';
import { HistogramBatch } from './histograms.ts';
import { AccessLog, type AccessLogCounts, type AccessLogSettings } from '../access-log/access-log.ts';
import { RefusalTally } from '../kernel-blocking/refusal-tally.ts';
import type { AppDdosOperatorSettings } from '../http/app-ddos/types.ts';
import { useHandleFrontEnd } from '../http/front/front-end.ts';
import { configureRefusalEngine, type RefusalEngineMode, refusalEngineUnavailable } from '../http/refusal-engine.ts';

export interface WorkerSettings {
  index: number;
  /** The process's log level: the worker writes the same JSON lines as the main thread. */
  logLevel: string;
  nodeId: string;
  /** IPv6 clients are counted per prefix of this length (rate limits, connection caps). */
  ipv6SourcePrefix: number;
  /** HTTP proxies' connection caps where a proxy sets no `connectionLimits` of its own. */
  httpConnectionLimits: FloodLimitSettings;
  /** UDP: bytes back per byte in until the client has shown it receives. */
  udpReplyBudgetFactor: number;
  /** The node's budget of edge connections (NodeConnectionBudget), shared by every worker; absent: none. */
  connectionBudget: SharedArrayBuffer | undefined;
  /** UDP: sessions per relay not yet confirmed; the oldest gives way to a new one. */
  udpMaxUnconfirmedSessions: number;
  /** Clients each proxy keeps rate-limit counters for (Redis: keys per proxy). */
  rateLimitClientsPerProxy: number;
  location: string;
  /** The node's threat-feed set when this worker starts (built once per node, in shared memory); later ones come as messages. */
  threatFeed: ThreatFeedSet | undefined;
  geoOverridesPath: string | undefined;
  geoMmdbPath: string | undefined;
  /** JSON-lines WAF audit log (one record per request with a matched rule); absent = none. */
  wafAuditLogPath: string | undefined;
  /** Threads of the WAF engine in this worker. */
  wafThreads: number;
  /** Requests that may wait for a WAF thread, per thread (then they are shed per client). */
  wafQueueLength: number;
  /** Percent of this worker's WAF threads' time one expensive client may use (100: no cap). */
  wafExpensiveClientPercent: number;
  /** How long a request's WAF transaction waits for its response (the hook's TTL, the engine's). */
  wafExchangeTtlMs: number;
  /** Early refusal of clients that keep running past the WAF's inspection budget. */
  wafBudgetOffenders: BudgetOffenderSettings;
  wafEngine: 'modsecurity' | 'compiled';
  /** Defaults of proxies' `waf.requestBodyLimit` and `waf.bodyLimitAction`, the multipart/form-data limit, the response limit. */
  wafBodyLimits: WafBodyLimits;
  /** Wall time of one inspection before it ends and `waf.failMode` applies. */
  wafRequestBudgetMs: number;
  /** Defaults of proxies' `waf.inputLimits`. */
  wafInputLimits: WafInputLimits;
  /** Rate-limit counters in Redis (several edge nodes) instead of this node's shared memory. */
  redisUrl: string | undefined;
  /** While Redis does not answer (an error, or no answer within the timeout): what rate limits do. */
  rateLimitStore: RateLimitStoreSettings;
  /** Load balancers whose PROXY headers and X-Forwarded-For name the client. */
  clientAddress: ClientAddressSettings;
  /** Where proxies may connect (origin-policy.ts), and the DNS servers that resolve origin names (empty: the system's). */
  origins: { policy: OriginPolicySettings; resolverServers: string[] };
  /** WAF events kept whole per proxy, source, matched rule set and minute (the rest: counted into samples). */
  insightWholeEventsPerMinute: number;
  /** One JSON line per request and layer 4 connection (TPS_ACCESS_LOG); absent = none. */
  accessLog: AccessLogSettings | undefined;
  /** The supervisor drops escalated sources in the kernel: refusals of blocked sources are reported to it. */
  kernelBlocking: boolean;
  /** TPS_EARLY_REFUSAL_ENGINE (src/edge/http/refusal-engine.ts). */
  earlyRefusalEngine: RefusalEngineMode;
  /** TPS_HTTP1_FRONT_END (src/edge/http/front/front-end.ts). */
  http1FrontEnd: 'handles' | 'node';
  /** The application-layer DDoS protection's operator settings and signing secret (derived from the master key). */
  appDdos: { settings: Partial<AppDdosOperatorSettings>; secret: Uint8Array };
}

interface Running {
  type: ConfigEntry['config']['type'];
  proxy: L4Proxy | HttpProxy;
  version: string;
}

const RETRY_FAILED_MS = 5_000;
const COUNTER_FLUSH_MS = 1_000;
/** How often this worker's sampled events go to the supervisor (which samples the node's workers together). */
const INSIGHT_SAMPLE_MS = 1_000;
/** Groups (proxy, source, rule set) this worker's sampler tracks at once. */
const INSIGHT_SAMPLER_GROUPS = 4_096;

const port = parentPort!;
const settings = workerData as WorkerSettings;
const send = (message: FromWorker) => port.postMessage(message);
const logger = createWorkerLogger(settings.logLevel, { nodeId: settings.nodeId, worker: settings.index });

const running = new Map<string, Running>();
/** Configurations that could not be served, kept to try again (the port may be freed). */
const failed = new Map<string, ConfigEntry>();
let wanted: ConfigEntry[] = [];
let queue: Promise<void> = Promise.resolve();

// ----- counters, sent to the supervisor (which owns the Prometheus registry) once a second -----
const counters = new Map<string, CounterIncrement>();
function count(name: EdgeCounterName, labels: Record<string, string>, value = 1): void {
  const key = `${name}|${Object.values(labels).join('|')}`;
  const existing = counters.get(key);
  if (existing) existing.value += value;
  else counters.set(key, { name, labels, value });
}
const histograms = new HistogramBatch();
function flushCounters(): void {
  if (counters.size === 0 && histograms.size === 0) return;
  send({ kind: 'counters', counters: [...counters.values()], histograms: histograms.take() });
  counters.clear();
}
setInterval(flushCounters, COUNTER_FLUSH_MS).unref();

const l4Metrics: L4Metrics = {
  connectionAccepted: (proxy, protocol) => count('tps_edge_connections_total', { proxy, protocol }),
  connectionRefused: (proxy, protocol, reason) => count('tps_edge_refused_total', { proxy, protocol, reason }),
  connectionClosed: (proxy, protocol, closed) => {
    count('tps_edge_bytes_total', { proxy, protocol, direction: 'from_client' }, closed.bytesFromClient);
    count('tps_edge_bytes_total', { proxy, protocol, direction: 'to_client' }, closed.bytesToClient);
    histograms.observe('tps_edge_l4_connection_duration_seconds', { proxy, protocol }, closed.durationSeconds);
  },
  originConnectFailed: (proxy, protocol) => count('tps_edge_origin_failures_total', { proxy, protocol }),
  datagramDropped: (proxy, protocol, reason) => count('tps_edge_dropped_total', { proxy, protocol, reason }),
  udpSessionEvicted: (proxy) => count('tps_edge_udp_sessions_evicted_total', { proxy }),
};

// ----- the access log: lines buffered here, written on libuv's pool, counted with the other counters -----
const accessLog = settings.accessLog
  ? new AccessLog(settings.accessLog, {
      onError: (err) => logger.error({ err, destination: settings.accessLog?.destination }, 'access log write failed: lines dropped'),
    })
  : undefined;
const reportedLines: AccessLogCounts = { written: 0, dropped: 0, sampled: 0 };
function reportAccessLogLines(): void {
  if (accessLog === undefined) return;
  const now = accessLog.counts;
  for (const outcome of ['written', 'dropped', 'sampled'] as const) {
    const delta = now[outcome] - reportedLines[outcome];
    if (delta === 0) continue;
    reportedLines[outcome] = now[outcome];
    count('tps_edge_access_log_lines_total', { outcome }, delta);
  }
}
if (accessLog !== undefined) setInterval(reportAccessLogLines, COUNTER_FLUSH_MS).unref();

// ----- shared services of this worker -----
/** Each proxy's share of the node's shared counters, from the latest snapshot (see ProxyCounterTables). */
const counterTables = new Map<string, ProxyCounterTables>();
const countingKey = (address: string): string => sourceKey(address, settings.ipv6SourcePrefix);
function tablesOf(proxyId: string): ProxyCounterTables {
  const tables = counterTables.get(proxyId);
  if (tables === undefined) throw new Error(`no counter tables for proxy ${proxyId}`);
  return tables;
}
// Commands fail at once while Redis is unreachable (no offline queue) and after `timeoutMs` when it
// does not answer (a stalled server, a lost network): then the failure mode decides
// (store-failover.ts). Each change of reachability is logged once.
const redis = settings.redisUrl
  ? new Redis(settings.redisUrl, {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      commandTimeout: settings.rateLimitStore.timeoutMs,
    })
  : undefined;
let redisReachable = true;
redis?.on('error', (err: Error) => {
  if (!redisReachable) return;
  redisReachable = false;
  logger.error({ err }, 'redis unreachable');
});
redis?.on('ready', () => {
  if (redisReachable) return;
  redisReachable = true;
  logger.info({}, 'redis reachable again');
});
// Whether this worker's rate-limit counters in Redis answer; the supervisor shows it on /healthz.
const rateLimitCircuit = new StoreCircuit({
  onChange: (failing, cause) => {
    const mode = settings.rateLimitStore.failureMode;
    if (failing) logger.error({ cause, failureMode: mode }, `rate-limit counters in redis do not answer: failure mode ${mode} applies`);
    else logger.info({}, 'rate-limit counters in redis answer again: shared counts in use');
    send({ kind: 'rate-limit-store', failing, cause });
  },
});
// Reads no source: the supervisor's feed thread builds each set once for the node (threat-feed-host.ts).
const threatFeed = ThreatFeed.fromShared(settings.threatFeed?.set);
const clientAddress = ClientAddressPolicy.from(settings.clientAddress);
// One count for every proxy of every worker: a place is taken at accept and given back at close.
const nodeBudget =
  settings.connectionBudget === undefined ? undefined : new NodeConnectionBudget(settings.connectionBudget, settings.index);
// Every origin connection of every proxy of this worker is checked here; a refusal is counted and logged.
const originGuard = new OriginGuard(
  new OriginPolicy(settings.origins.policy),
  createOriginResolver(settings.origins.resolverServers),
  (refusal) => {
    count('tps_edge_origin_refused_total', { proxy: refusal.scope, reason: refusal.reason });
    logger.warn(
      { proxyId: refusal.scope, host: refusal.host, address: refusal.address, port: refusal.port, reason: refusal.reason },
      'origin refused by the origin policy',
    );
  },
);
// The first sampling stage: under a flood, one message a second per group instead of one per request.
const insightSampler = new InsightSampler({ wholePerWindow: settings.insightWholeEventsPerMinute, maxGroups: INSIGHT_SAMPLER_GROUPS });
const insight: InsightSink = {
  record: (event) => {
    const outcome = insightSampler.admit(event);
    if (outcome === 'whole') send({ kind: 'insight', event });
    else if (outcome === 'counted') count('tps_insight_sampled_requests_total', {});
    else if (outcome === 'overflow') count('tps_insight_overflow_requests_total', {});
    else count('tps_insight_dropped_requests_total', {});
  },
  updateRateLimitEpisode: (eventId, update) => send({ kind: 'insight-update', eventId, update }),
};
function sendInsightSamples(): void {
  for (const event of insightSampler.takeSamples()) send({ kind: 'insight', event });
}
setInterval(sendInsightSamples, INSIGHT_SAMPLE_MS).unref();

/**
 * The WAF engine starts with the first HTTP proxy this worker serves (a node of layer 4 proxies
 * never loads the rule set). One rule set per worker serves every proxy: per-proxy settings
 * (paranoia, mode, threshold, exclusions) are data passed with each request.
 */
let wafEngine: Promise<ExchangingEngine> | undefined;
const lazyWafEngine: WafEngine = {
  name: settings.wafEngine,
  inspectRequest: async (request, wafSettings) => (await (wafEngine ??= startWafEngine())).inspectRequest(request, wafSettings),
  beginExchange: async (request, wafSettings) => (await (wafEngine ??= startWafEngine())).beginExchange(request, wafSettings),
  close: async () => {
    if (wafEngine) await (await wafEngine).close();
  },
};
function startWafEngine(): Promise<ExchangingEngine> {
  // The proxy applies each proxy's body limit before the engine sees a body: the engine's own limit
  // is the largest any proxy may have, so that it never cuts what it is handed.
  const body = settings.wafBodyLimits;
  const limits = {
    requestBodyLimit: Math.max(1, body.request, body.multipart, MAX_WAF_REQUEST_BODY_LIMIT),
    responseBodyLimit: Math.max(1, body.response),
    responseBodyAccess: body.response > 0,
  };
  return startEngine(settings.wafEngine, {
    workers: settings.wafThreads,
    queueLength: settings.wafQueueLength * settings.wafThreads,
    expensiveClientShare: settings.wafExpensiveClientPercent / 100,
    // The engine keeps a transaction a little longer than the hook, which ends it first and counts it.
    exchangeTimeoutMs: settings.wafExchangeTtlMs + 1000,
    ...limits,
    requestBudgetMs: settings.wafRequestBudgetMs,
    // The backstop for a step no engine can interrupt (and ModSecurity's only bound): well past the budget.
    runawayMs: defaultRunawayMs(settings.wafRequestBudgetMs),
    onThreadRestart: (cause) => count('tps_edge_waf_thread_restarts_total', { cause }),
  });
}
const wafAuditLog = settings.wafAuditLogPath ? new WafAuditLog(settings.wafAuditLogPath) : undefined;
const reportedAudit = { written: 0, dropped: 0 };
if (wafAuditLog !== undefined) {
  setInterval(() => {
    for (const outcome of ['written', 'dropped'] as const) {
      const delta = wafAuditLog[outcome] - reportedAudit[outcome];
      if (delta === 0) continue;
      reportedAudit[outcome] = wafAuditLog[outcome];
      count('tps_edge_waf_audit_log_lines_total', { outcome }, delta);
    }
  }, COUNTER_FLUSH_MS).unref();
}
const wafHook = createWafHook(lazyWafEngine, {
  requestBodyLimit: settings.wafBodyLimits.request,
  multipartBodyLimit: settings.wafBodyLimits.multipart,
  responseBodyLimit: settings.wafBodyLimits.response,
  bodyLimitAction: settings.wafBodyLimits.action,
  exchangeTtlMs: settings.wafExchangeTtlMs,
  ...(wafAuditLog && { auditLog: wafAuditLog }),
  // Per rule id, never per proxy or client: the series are bounded by the rule set.
  onRulesMatched: (rules) => {
    for (const rule of rules) count('tps_edge_waf_rule_matches_total', { rule: String(rule.id) });
  },
});
// How the WAF's exchanges ended, with the other counters: `opened` running ahead of the others for
// long, or any `expired`, is a request whose end did not reach the WAF.
const reportedExchanges = { opened: 0, inspected: 0, abandoned: 0, expired: 0 };
setInterval(() => {
  const now = wafHook.exchangeCounts;
  for (const event of ['opened', 'inspected', 'abandoned', 'expired'] as const) {
    const delta = now[event] - reportedExchanges[event];
    if (delta === 0) continue;
    reportedExchanges[event] = now[event];
    count('tps_edge_waf_exchanges_total', { event }, delta);
  }
}, COUNTER_FLUSH_MS).unref();

// Blocked sources' repeated requests: the native engine, or the JavaScript path said once in the log.
configureRefusalEngine(settings.earlyRefusalEngine);
const refusalEngineMissing = settings.earlyRefusalEngine === 'auto' ? refusalEngineUnavailable() : undefined;
if (refusalEngineMissing !== undefined) logger.warn({}, `early refusals on the JavaScript path: ${refusalEngineMissing}`);

// Plain HTTP/1.1: simple requests on the handle front end, or every connection to node:http.
useHandleFrontEnd(settings.http1FrontEnd === 'handles');

// Kernel blocking: the supervisor adds up every worker's refusals and decides (kernel-blocking/escalation.ts).
const refusalTally = settings.kernelBlocking ? new RefusalTally((refusals) => send({ kind: 'refusals', refusals })) : undefined;

let acmeRequests = 0;
const pendingAcme = new Map<number, (keyAuthorization: string | undefined) => void>();
const pendingAlpn = new Map<number, (certificate: { certPem: string; keyPem: string } | undefined) => void>();
const httpDeps: HttpProxyDeps = {
  insight,
  geo: sharedGeoLookup({
    ...(settings.geoMmdbPath && { mmdbPath: settings.geoMmdbPath }),
    ...(settings.geoOverridesPath && { overridesPath: settings.geoOverridesPath }),
  }),
  location: settings.location,
  logger,
  originGuard,
  waf: wafHook,
  wafBudgetOffenders: settings.wafBudgetOffenders,
  wafInputLimits: settings.wafInputLimits,
  rateLimit: {
    createStore: (policy, proxyId) => {
      const periodsMs = policy.thresholds.map((threshold) => threshold.periodSeconds * 1000);
      const table = tablesOf(proxyId).rate;
      if (table === undefined) throw new Error(`no rate-limit table for proxy ${proxyId}`);
      const local = new SharedRateLimitStore(new SharedTable(table), periodsMs);
      if (!redis) return local;
      // Scoped by the periods too: changed thresholds start from fresh counters, never misread old ones.
      const shared = new RedisRateLimitStore(redis, `${proxyId}|${periodsMs.join(',')}`, periodsMs, {
        maxClients: settings.rateLimitClientsPerProxy,
      });
      return new FailoverRateLimitStore(shared, local, {
        mode: settings.rateLimitStore.failureMode,
        periods: periodsMs.length,
        circuit: rateLimitCircuit,
        onDecided: (mode) => count('tps_edge_rate_limit_store_failures_total', { proxy: proxyId, mode }),
        onLog: ({ mode, requests, cause }) =>
          logger.warn(
            { proxyId, failureMode: mode, requests, cause },
            `rate-limit counters in redis did not answer: ${requests} requests decided by failure mode ${mode} since the last line`,
          ),
      });
    },
    ipv6Prefix: settings.ipv6SourcePrefix,
  },
  connectionLimits: {
    defaults: settings.httpConnectionLimits,
    create: (proxyId, limits) => new SharedFloodLimiter(new SharedTable(tablesOf(proxyId).flood), limits, { sourceKey: countingKey }),
  },
  appDdos: {
    settings: settings.appDdos.settings,
    // A Buffer arrives here as a plain Uint8Array (structured clone).
    secret: Buffer.from(settings.appDdos.secret),
    nodeId: settings.nodeId,
    ...(redis && { cluster: new RedisClusterRate(redis) }),
    tables: (proxyId) => tablesOf(proxyId).appDdos,
    counted: (proxy, outcome) => count('tps_edge_app_ddos_requests_total', { proxy, outcome }),
    attackChanged: (proxy, active) => count('tps_edge_app_ddos_attacks_total', { proxy, event: active ? 'started' : 'ended' }),
  },
  // Challenges live in the store, which only the supervisor reads.
  acmeChallenge: (token, host, tenantId) =>
    new Promise((resolve) => {
      const requestId = ++acmeRequests;
      pendingAcme.set(requestId, resolve);
      send({ kind: 'acme-lookup', requestId, token, host, tenantId });
    }),
  acmeTlsAlpn: {
    alpnChallengeCertificate: (servername, tenantId) =>
      new Promise((resolve) => {
        const requestId = ++acmeRequests;
        pendingAlpn.set(requestId, resolve);
        send({ kind: 'acme-alpn-lookup', requestId, servername, tenantId });
      }),
  },
  ...(accessLog && { accessLog: accessLog.http }),
  metrics: {
    requestCompleted: (proxy, status, answeredBy, durationSeconds, originSeconds) => {
      count('tps_edge_http_requests_total', { proxy, answered_by: answeredBy, status_class: statusClass(status) });
      histograms.observe('tps_edge_http_request_duration_seconds', { proxy }, durationSeconds);
      if (originSeconds !== undefined) histograms.observe('tps_edge_origin_response_seconds', { proxy }, originSeconds);
    },
    requestsRefused: (proxy, answeredBy, status, refused) =>
      count('tps_edge_http_requests_total', { proxy, answered_by: answeredBy, status_class: statusClass(status) }, refused),
    connectionRefused: (proxy, protocol, reason) => count('tps_edge_refused_total', { proxy, protocol, reason }),
    requestRefused: (proxy, protocol, reason) => count('tps_edge_refused_total', { proxy, protocol, reason }),
    wafUninspected: (proxy, side, reason, outcome) => count('tps_edge_waf_uninspected_total', { proxy, side, reason, outcome }),
    wafBodyOverLimit: (proxy, action) => count('tps_edge_waf_body_over_limit_total', { proxy, action }),
    wafBudgetOffenderRefused: (proxy) => count('tps_edge_waf_budget_offender_refused_total', { proxy }),
  },
  reusePort: true,
  ...(clientAddress && { clientAddress }),
  ...(nodeBudget && { nodeBudget }),
  ...(refusalTally && {
    onBlockedRefusal: (proxyId: string, source: string, blockedUntil: number, requests?: number) =>
      refusalTally.note(proxyId, source, 'rate-limit', blockedUntil, requests),
  }),
};

/** `2xx`, `4xx`...; `none` when no response head was sent. */
function statusClass(status: number): string {
  return status >= 100 && status < 600 ? `${Math.floor(status / 100)}xx` : 'none';
}

function describe(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  const message = error instanceof Error ? error.message : String(error);
  return code && !message.startsWith(code) ? `${code}: ${message}` : message;
}

async function startProxy(entry: ConfigEntry): Promise<Running> {
  const { config } = entry;
  const proxy =
    config.type === 'l4Proxy'
      ? new L4Proxy({
          id: config.id,
          attributes: config.attributes,
          threatFeed,
          originGuard,
          metrics: l4Metrics,
          reusePort: true,
          logger,
          createFloodAdmission: (limits) =>
            new SharedFloodLimiter(new SharedTable(tablesOf(config.id).flood), limits, { sourceKey: countingKey }),
          udpReplyBudgetFactor: settings.udpReplyBudgetFactor,
          maxUnconfirmedUdpSessions: settings.udpMaxUnconfirmedSessions,
          ...(clientAddress && { clientAddress }),
          tenantId: config.tenantId,
          ...(accessLog && { accessLog: accessLog.l4 }),
          ...(nodeBudget && { nodeBudget }),
          // The listed address itself (an IPv6 one as a /128): a feed entry says nothing of its neighbours.
          ...(refusalTally && {
            onThreatFeedRefusal: (proxyId: string, source: string) => refusalTally.note(proxyId, sourceKey(source, 128), 'threat-feed', 0),
          }),
        })
      : new HttpProxy(config, httpDeps);
  await proxy.start();
  return { type: config.type, proxy, version: entry.version };
}

async function applyEntry(entry: ConfigEntry): Promise<void> {
  const { config } = entry;
  const current = running.get(config.id);
  if (current && current.version === entry.version) return;
  try {
    if (current && current.type === config.type) {
      if (config.type === 'l4Proxy') await (current.proxy as L4Proxy).update(config.attributes);
      else await (current.proxy as HttpProxy).update(config);
      current.version = entry.version;
    } else {
      if (current) await current.proxy.stop();
      running.delete(config.id);
      running.set(config.id, await startProxy(entry));
    }
    failed.delete(config.id);
    send({ kind: 'status', id: config.id, version: entry.version, state: 'ACTIVE', detail: null });
  } catch (error) {
    failed.set(config.id, entry);
    send({ kind: 'status', id: config.id, version: entry.version, state: 'ERROR', detail: describe(error) });
  }
}

async function apply(entries: ConfigEntry[]): Promise<void> {
  wanted = entries;
  const ids = new Set(entries.map((entry) => entry.config.id));
  // Before any proxy starts or updates: a new snapshot may bring a new rate-limit table (new periods).
  for (const entry of entries) counterTables.set(entry.config.id, entry.counters);
  for (const [id, current] of running) {
    if (ids.has(id)) continue;
    running.delete(id);
    await current.proxy.stop().catch(() => {});
    send({ kind: 'removed', id });
  }
  for (const id of counterTables.keys()) if (!ids.has(id)) counterTables.delete(id);
  for (const id of failed.keys()) if (!ids.has(id)) failed.delete(id);
  // Released ports first, then the rest: a port moved from one proxy to another is free in time.
  for (const entry of entries) await applyEntry(entry);
}

const enqueue = (work: () => Promise<void>) => {
  queue = queue.then(work, work);
};

setInterval(() => {
  if (failed.size === 0) return;
  enqueue(async () => {
    for (const entry of [...failed.values()]) if (wanted.includes(entry)) await applyEntry(entry);
  });
}, RETRY_FAILED_MS).unref();

port.on('message', (message: ToWorker) => {
  switch (message.kind) {
    case 'apply':
      enqueue(() => apply(message.entries));
      break;
    case 'acme-answer':
      pendingAcme.get(message.requestId)?.(message.keyAuthorization);
      pendingAcme.delete(message.requestId);
      break;
    case 'acme-alpn-answer':
      pendingAlpn.get(message.requestId)?.(message.certificate);
      pendingAlpn.delete(message.requestId);
      break;
    case 'threat-feed':
      // One assignment: a connection being admitted sees the old set or the new one.
      threatFeed.adopt(message.set);
      send({ kind: 'threat-feed-applied', generation: message.generation });
      break;
    case 'kernel-blocked': {
      const current = running.get(message.proxyId);
      if (current?.proxy instanceof HttpProxy) {
        const reset = current.proxy.resetConnectionsOf(message.source);
        if (reset > 0)
          logger.info({ proxyId: message.proxyId, source: message.source, reset }, 'connections of a source dropped in the kernel reset');
      }
      break;
    }
    case 'stop':
      enqueue(async () => {
        threatFeed.stop();
        await lazyWafEngine.close().catch(() => {});
        redis?.disconnect();
        await Promise.all([...running.values()].map((current) => current.proxy.stop().catch(() => {})));
        running.clear();
        sendInsightSamples();
        await accessLog?.close().catch(() => {});
        reportAccessLogLines();
        flushCounters();
        send({ kind: 'stopped' });
        logger.flush();
        process.exit(0);
      });
      break;
  }
});

if (settings.threatFeed) send({ kind: 'threat-feed-applied', generation: settings.threatFeed.generation });
send({ kind: 'ready' });
