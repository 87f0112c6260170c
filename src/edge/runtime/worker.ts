/**
 * A proxy worker: one thread that serves every configuration of the edge node. Each worker binds
 * the same front-end ports with SO_REUSEPORT, so the kernel spreads connections over the workers,
 * and a worker that dies takes none of the others with it: the supervisor starts it again.
 *
 * The worker applies whole snapshots: a configuration whose version did not change is left alone
 * (its listeners and connections untouched), a changed one is updated live, a missing one stopped.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { L4Proxy, type L4Metrics } from '../l4/l4-proxy.ts';
import { ThreatFeed } from '../l4/threat-feed.ts';
import { HttpProxy, type HttpProxyDeps } from '../http/http-proxy.ts';
import { sharedGeoLookup } from '../geo/geo-lookup.ts';
import type { InsightSink } from '../../insight/event.ts';
import { SharedTable, type SharedTableInit } from '../shared-counters/shared-table.ts';
import { SharedRateLimitStore } from '../shared-counters/shared-rate-store.ts';
import { SharedFloodLimiter } from '../shared-counters/shared-flood-limiter.ts';
import { RedisRateLimitStore } from '../shared-counters/redis-rate-store.ts';
import { Redis } from 'ioredis';
import { createWafHook } from '../http/waf/waf-hook.ts';
import { WafAuditLog } from '../http/waf/audit-log.ts';
import { createModSecurityEngine } from '../http/waf/modsecurity-engine.ts';
import { createCompiledEngine } from '../http/waf/compiled/compiled-engine.ts';
import type { WafEngine } from '../http/waf/engine.ts';
import { MAX_WAF_REQUEST_BODY_LIMIT } from '../../api/schemas/traffic-config.ts';
import { ClientAddressPolicy, type ClientAddressSettings } from '../client-address/policy.ts';
import type { ConfigEntry, CounterIncrement, EdgeCounterName, FromWorker, ToWorker, WafBodyLimits } from './messages.ts';
import type { ThreatFeedSet } from './threat-feed-host.ts';
import { createWorkerLogger } from './worker-logger.ts';

export interface WorkerSettings {
  index: number;
  /** The process's log level: the worker writes the same JSON lines as the main thread. */
  logLevel: string;
  nodeId: string;
  /** Rate-limit counters shared by all workers of the node. */
  rateTable: SharedTableInit;
  /** Layer 4 flood-cap counters shared by all workers of the node. */
  floodTable: SharedTableInit;
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
  wafEngine: 'modsecurity' | 'compiled';
  /** Defaults of proxies' `waf.requestBodyLimit` and `waf.bodyLimitAction`, the multipart/form-data limit, the response limit. */
  wafBodyLimits: WafBodyLimits;
  /** Rate-limit counters in Redis (several edge nodes) instead of this node's shared memory. */
  redisUrl: string | undefined;
  /** Load balancers whose PROXY headers and X-Forwarded-For name the client. */
  clientAddress: ClientAddressSettings;
}

interface Running {
  type: ConfigEntry['config']['type'];
  proxy: L4Proxy | HttpProxy;
  version: string;
}

const RETRY_FAILED_MS = 5_000;
const COUNTER_FLUSH_MS = 1_000;

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
setInterval(() => {
  if (counters.size === 0) return;
  send({ kind: 'counters', counters: [...counters.values()] });
  counters.clear();
}, COUNTER_FLUSH_MS).unref();

const l4Metrics: L4Metrics = {
  connectionAccepted: (proxy, protocol) => count('tps_edge_connections_total', { proxy, protocol }),
  connectionRefused: (proxy, protocol, reason) => count('tps_edge_refused_total', { proxy, protocol, reason }),
  connectionClosed: (proxy, protocol, closed) => {
    count('tps_edge_bytes_total', { proxy, protocol, direction: 'from_client' }, closed.bytesFromClient);
    count('tps_edge_bytes_total', { proxy, protocol, direction: 'to_client' }, closed.bytesToClient);
  },
  originConnectFailed: (proxy, protocol) => count('tps_edge_origin_failures_total', { proxy, protocol }),
};

// ----- shared services of this worker -----
const rateTable = new SharedTable(settings.rateTable);
const floodTable = new SharedTable(settings.floodTable);
// Commands fail fast while Redis is unreachable (the rate-limit phase then lets requests through,
// and says so in the log). Each change of reachability is logged once.
const redis = settings.redisUrl ? new Redis(settings.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false }) : undefined;
let redisReachable = true;
redis?.on('error', (err: Error) => {
  if (!redisReachable) return;
  redisReachable = false;
  logger.error({ err }, 'redis unreachable: rate limits are not enforced until it is back');
});
redis?.on('ready', () => {
  if (redisReachable) return;
  redisReachable = true;
  logger.info({}, 'redis reachable again: rate limits enforced');
});
// Reads no source: the supervisor's feed thread builds each set once for the node (threat-feed-host.ts).
const threatFeed = ThreatFeed.fromShared(settings.threatFeed?.set);
const clientAddress = ClientAddressPolicy.from(settings.clientAddress);
const insight: InsightSink = {
  record: (event) => send({ kind: 'insight', event }),
  updateRateLimitEpisode: (eventId, update) => send({ kind: 'insight-update', eventId, update }),
};

/**
 * The WAF engine starts with the first HTTP proxy this worker serves (a node of layer 4 proxies
 * never loads the rule set). One rule set per worker serves every proxy: per-proxy settings
 * (paranoia, mode, threshold, exclusions) are data passed with each request.
 */
/** Both engines keep a transaction from the request to its response (response phases). */
type ExchangingEngine = WafEngine & Required<Pick<WafEngine, 'beginExchange'>>;
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
  const pool = { workers: settings.wafThreads, queueLength: settings.wafQueueLength * settings.wafThreads };
  return settings.wafEngine === 'compiled' ? createCompiledEngine({ ...pool, ...limits }) : createModSecurityEngine({ ...pool, ...limits });
}
const wafHook = createWafHook(lazyWafEngine, {
  requestBodyLimit: settings.wafBodyLimits.request,
  multipartBodyLimit: settings.wafBodyLimits.multipart,
  responseBodyLimit: settings.wafBodyLimits.response,
  bodyLimitAction: settings.wafBodyLimits.action,
  ...(settings.wafAuditLogPath && { auditLog: new WafAuditLog(settings.wafAuditLogPath) }),
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
  waf: wafHook,
  rateLimit: {
    createStore: (policy, proxyId) => {
      const periodsMs = policy.thresholds.map((threshold) => threshold.periodSeconds * 1000);
      // Scoped by the periods too: changed thresholds start from fresh counters, never misread old ones.
      const scope = `${proxyId}|${periodsMs.join(',')}`;
      return redis ? new RedisRateLimitStore(redis, scope, periodsMs) : new SharedRateLimitStore(rateTable, scope, periodsMs);
    },
  },
  // Challenges live in the store, which only the supervisor reads.
  acmeChallenge: (token, host) =>
    new Promise((resolve) => {
      const requestId = ++acmeRequests;
      pendingAcme.set(requestId, resolve);
      send({ kind: 'acme-lookup', requestId, token, host });
    }),
  acmeTlsAlpn: {
    alpnChallengeCertificate: (servername) =>
      new Promise((resolve) => {
        const requestId = ++acmeRequests;
        pendingAlpn.set(requestId, resolve);
        send({ kind: 'acme-alpn-lookup', requestId, servername });
      }),
  },
  metrics: {
    requestCompleted: (proxy, status, answeredBy) =>
      count('tps_edge_http_requests_total', { proxy, status: String(status), answered_by: answeredBy }),
    wafUninspected: (proxy, side, reason, outcome) => count('tps_edge_waf_uninspected_total', { proxy, side, reason, outcome }),
    wafBodyOverLimit: (proxy, action) => count('tps_edge_waf_body_over_limit_total', { proxy, action }),
  },
  reusePort: true,
  ...(clientAddress && { clientAddress }),
};

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
          metrics: l4Metrics,
          reusePort: true,
          logger,
          createFloodAdmission: (limits) => new SharedFloodLimiter(floodTable, config.id, limits),
          ...(clientAddress && { clientAddress }),
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
  for (const [id, current] of running) {
    if (ids.has(id)) continue;
    running.delete(id);
    await current.proxy.stop().catch(() => {});
    send({ kind: 'removed', id });
  }
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
    case 'stop':
      enqueue(async () => {
        threatFeed.stop();
        await lazyWafEngine.close().catch(() => {});
        redis?.disconnect();
        await Promise.all([...running.values()].map((current) => current.proxy.stop().catch(() => {})));
        running.clear();
        send({ kind: 'stopped' });
        logger.flush();
        process.exit(0);
      });
      break;
  }
});

if (settings.threatFeed) send({ kind: 'threat-feed-applied', generation: settings.threatFeed.generation });
send({ kind: 'ready' });
