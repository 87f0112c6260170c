/**
 * `tps serve`: the control plane (API, token issuer, docs) and, unless TPS_EDGE=false, the edge in
 * the same process; `tps edge`: an edge node alone. Both serve /metrics and /healthz on the
 * operators' listener (TPS_METRICS_LISTEN).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { Counter } from 'prom-client';
import type { Settings } from '../config/settings.ts';
import { openStore, type Store } from '../store/index.ts';
import { SecretBox } from '../certs/secret-box.ts';
import { upgradeSealedSecrets } from '../certs/upgrade-sealed-secrets.ts';
import { AcmeService } from '../certs/acme.ts';
import { CrlService } from '../certs/crl.ts';
import { TokenIssuer } from '../auth/token-issuer.ts';
import { buildApiServer } from '../api/server.ts';
import type { PublicUrls } from '../api/types.ts';
import { createMetrics, type Metrics } from '../metrics.ts';
import { startMetricsListener, type MetricsListener } from '../metrics-listener.ts';
import { EdgeSupervisor } from '../edge/runtime/supervisor.ts';
import type { EdgeLogger } from '../edge/runtime/types.ts';
import { AcmeChallengeResponder } from '../certs/acme-challenges.ts';
import { OriginPolicy, type OriginPolicySettings } from '../net/origin-policy.ts';
import { OriginGuard } from '../net/origin-guard.ts';
import { createOriginResolver } from '../net/origin-resolver.ts';
import { originPolicySettings, ownHosts } from './own-listeners.ts';
import { InsightWriter } from '../store/insight-writer.ts';
import { EventSinks } from '../insight/sinks/event-sinks.ts';
import { SettingsError } from '../config/settings.ts';
import type { HealthReport } from '../metrics-listener.ts';
import { startDemo } from './demo.ts';
import { edgeBudget, EdgeBudgetError, parseOpenFilesLimit, type EdgeBudget } from '../edge/runtime/fd-budget.ts';

export interface RunningService {
  urls: PublicUrls;
  /** The operators' listener: /metrics and /healthz. */
  metricsUrl: string;
  store: Store;
  edge: EdgeSupervisor | undefined;
  /** Writes the edge's insight events and runs their retention, on a thread of its own. */
  insightWriter: InsightWriter;
  close(): Promise<void>;
}

export async function serve(settings: Settings, options: { demo?: boolean } = {}): Promise<RunningService> {
  // Before anything opens: a budget the file-descriptor limit cannot hold stops the start.
  const budget = settings.edge ? edgeConnectionBudget(settings, true) : undefined;
  const store = await openStore(settings);
  const secrets = SecretBox.fromSettings(settings);
  await upgradeSealedSecrets(store, secrets, pino({ level: settings.logLevel }));
  const urls: PublicUrls = { baseUrl: settings.baseUrl ?? '', authUrl: settings.authUrl ?? '' };
  // The URLs may depend on the port the listener gets, so the issuer reads them at each call.
  const tokens = new TokenIssuer(store, secrets, {
    get audience() {
      return urls.baseUrl;
    },
    get issuer() {
      return urls.authUrl;
    },
    ttlSeconds: settings.tokenTtlSeconds,
    reuseSeconds: settings.tokenReuseSeconds,
  });
  await tokens.init();
  const metrics = createMetrics();
  // The origin policy refuses the service's own addresses; the hosts are known now (a name that
  // does not resolve stops the start), the listeners' ports once they are bound below.
  const hosts = await ownHosts(settings);
  let originPolicy: OriginPolicy | undefined;
  // Service-issued certificates (ACME) and CA certificates' CRLs: background work next to the API.
  let acme: AcmeService | undefined;
  const app = await buildApiServer({
    settings,
    store,
    tokens,
    secrets,
    metrics,
    urls,
    get acme() {
      return acme;
    },
    get originPolicy() {
      return originPolicy;
    },
  });
  if (settings.acmeDirectoryUrl) {
    acme = new AcmeService({
      store,
      secrets,
      directoryUrl: settings.acmeDirectoryUrl,
      email: settings.acmeEmail,
      caBundlePem: settings.acmeCaBundle ? fs.readFileSync(settings.acmeCaBundle, 'utf8') : undefined,
      nodeId: settings.nodeId,
      logger: app.log,
      registry: metrics.registry,
    });
  }
  let edge: EdgeSupervisor | undefined;
  const operators = await startMetricsListener({
    listen: settings.metricsListen,
    metrics,
    health: () => nodeHealth(store, edge),
    maxConnections: settings.metricsMaxConnections,
  });
  await app.listen({ host: settings.apiListen.host, port: settings.apiListen.port });

  const address = app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const ownUrl = `http://${host}:${address.port}`;
  urls.baseUrl ||= ownUrl;
  urls.authUrl ||= ownUrl;
  const policySettings = originPolicySettings(settings, hosts, [{ host: address.address, port: address.port }, operators.address]);
  originPolicy = new OriginPolicy(policySettings);

  const crl = new CrlService({
    store,
    logger: app.log,
    originGuard: originGuardFor(originPolicy, settings, app.log, metrics),
    refreshIntervalMs: settings.crlRefreshSeconds * 1000,
    fetchTimeoutMs: settings.crlFetchTimeoutSeconds * 1000,
    maxBytes: settings.crlMaxBytes,
    concurrency: settings.crlFetches,
    concurrencyPerTenant: settings.crlFetchesPerTenant,
    registry: metrics.registry,
  });
  // Retention runs on every node, with or without an edge: events may come from other nodes.
  const insightWriter = await startInsightWriter(settings, metrics, app.log);
  edge = budget ? await startEdge(settings, store, secrets, metrics, app.log, policySettings, insightWriter, budget) : undefined;
  // Orders resumed at start (PENDING across a restart) validate against this node's proxies: let
  // them listen first (bounded: a proxy that cannot bind must not hold the certificates back).
  if (acme && edge && !(await edge.whenApplied(15_000)))
    app.log.warn({}, 'edge workers not ready after 15 s; starting the ACME service anyway');
  acme?.start();
  crl.start();

  app.log.info(
    {
      apiUrl: ownUrl,
      metricsUrl: operators.url,
      baseUrl: urls.baseUrl,
      authUrl: urls.authUrl,
      store: store.db.dialect,
      edge: settings.edge,
    },
    'tps ready',
  );
  const demo = options.demo ? await startDemo({ store, app, urls, settings, edge, logger: app.log }) : undefined;

  return {
    urls,
    metricsUrl: operators.url,
    store,
    edge,
    insightWriter,
    close: async () => {
      await operators.close();
      await edge?.stop();
      await demo?.close();
      await insightWriter.close();
      await acme?.stop();
      await crl.stop();
      await app.close();
      await store.close();
    },
  };
}

/** `tps edge`: an edge node without the API, for several nodes sharing one PostgreSQL store. */
export async function runEdgeNode(settings: Settings): Promise<{ metricsUrl: string; close(): Promise<void> }> {
  const budget = edgeConnectionBudget(settings, false);
  const store = await openStore(settings);
  const secrets = SecretBox.fromSettings(settings);
  const logger = pino({ level: settings.logLevel });
  await upgradeSealedSecrets(store, secrets, logger);
  const metrics = createMetrics();
  const hosts = await ownHosts(settings);
  const insightWriter = await startInsightWriter(settings, metrics, logger);
  let edge: EdgeSupervisor | undefined;
  const operators: MetricsListener = await startMetricsListener({
    listen: settings.metricsListen,
    metrics,
    health: () => nodeHealth(store, edge),
    maxConnections: settings.metricsMaxConnections,
  });
  // This node runs no API; TPS_API_LISTEN names where the cluster's API listens, refused as an origin too.
  const policySettings = originPolicySettings(settings, hosts, [settings.apiListen, operators.address]);
  edge = await startEdge(settings, store, secrets, metrics, logger, policySettings, insightWriter, budget);
  logger.info({ nodeId: settings.nodeId, metricsUrl: operators.url, store: store.db.dialect }, 'tps edge ready');
  return {
    metricsUrl: operators.url,
    close: async () => {
      await operators.close();
      await edge?.stop();
      await insightWriter.close();
      await store.close();
    },
  };
}

function startInsightWriter(settings: Settings, metrics: Metrics, logger: EdgeLogger): Promise<InsightWriter> {
  return InsightWriter.start({
    dataDir: settings.dataDir,
    databaseUrl: settings.databaseUrl,
    writer: settings.nodeId,
    limits: {
      retentionDays: settings.insightRetentionDays,
      maxBytes: settings.insightMaxBytes,
      tenantSharePercent: settings.insightTenantSharePercent,
    },
    registry: metrics.registry,
    logger,
  });
}

export async function startEdge(
  settings: Settings,
  store: Store,
  secrets: SecretBox,
  metrics: Metrics,
  logger: EdgeLogger,
  originPolicy: OriginPolicySettings,
  insightWriter: InsightWriter,
  budget: EdgeBudget,
): Promise<EdgeSupervisor> {
  logger.info(
    { edgeMaxConnections: budget.maxConnections, source: budget.source, fdLimit: budget.fdLimit, fdReserve: budget.reserve },
    'edge connection budget',
  );
  const challenges = new AcmeChallengeResponder(store.acmeChallenges);
  // The access log's file is opened by every worker: a path that cannot be written stops the start here, named.
  if (settings.accessLog !== undefined && settings.accessLog !== 'stdout') {
    try {
      fs.mkdirSync(path.dirname(settings.accessLog), { recursive: true });
      fs.closeSync(fs.openSync(settings.accessLog, 'a', 0o640));
    } catch (error) {
      throw new SettingsError(`TPS_ACCESS_LOG: cannot write "${settings.accessLog}": ${(error as Error).message}`);
    }
  }
  let eventSinks: EventSinks | undefined;
  if (settings.eventSinks.length > 0) {
    try {
      eventSinks = new EventSinks(settings.eventSinks, { registry: metrics.registry, logger, nodeId: settings.nodeId });
    } catch (error) {
      throw new SettingsError(`TPS_EVENT_SINKS: ${(error as Error).message}`);
    }
  }
  const edge = new EdgeSupervisor({
    store,
    secrets,
    metrics,
    logger,
    logLevel: settings.logLevel,
    nodeId: settings.nodeId,
    location: settings.location,
    workers: settings.edgeWorkers,
    threatFeeds: settings.threatFeeds,
    threatFeedRefreshMs: settings.threatFeedRefreshSeconds * 1000,
    geoOverridesPath: settings.geoOverridesPath,
    geoMmdbPath: settings.geoMmdbPath,
    wafAuditLogPath: settings.wafAuditLog,
    wafThreads: settings.wafThreads,
    wafQueueLength: settings.wafQueueLength,
    wafExpensiveClientPercent: settings.wafExpensiveClientPercent,
    wafExchangeTtlMs: settings.wafExchangeTtlSeconds * 1000,
    wafBudgetOffenders: {
      overruns: settings.wafOffenderOverruns,
      windowSeconds: settings.wafOffenderWindowSeconds,
      blockSeconds: settings.wafOffenderBlockSeconds,
    },
    wafEngine: settings.wafEngine,
    wafBodyLimits: {
      request: settings.wafRequestBodyLimit,
      multipart: settings.wafMultipartBodyLimit,
      response: settings.wafResponseBodyLimit,
      action: settings.wafBodyLimitAction,
    },
    wafRequestBudgetMs: settings.wafRequestBudgetMs,
    wafInputLimits: {
      arguments: settings.wafArgumentsLimit,
      multipartParts: settings.wafMultipartPartsLimit,
      jsonDepth: settings.wafJsonDepthLimit,
      jsonElements: settings.wafJsonElementsLimit,
      xmlDepth: settings.wafXmlDepthLimit,
      valueLength: settings.wafValueLengthLimit,
    },
    redisUrl: settings.redisUrl,
    rateLimitStore: { failureMode: settings.rateLimitStoreFailureMode, timeoutMs: settings.rateLimitStoreTimeoutMs },
    rateLimitClientsPerProxy: settings.rateLimitClientsPerProxy,
    ipv6SourcePrefix: settings.rateLimitIpv6Prefix,
    httpConnectionLimits: {
      maxConnectionsPerSource: settings.httpMaxConnectionsPerSource,
      maxNewConnectionsPerSecondPerSource: settings.httpMaxNewConnectionsPerSecondPerSource,
      maxConnections: settings.httpMaxConnections,
    },
    udpReplyBudgetFactor: settings.udpReplyBudgetFactor,
    maxConnections: budget.maxConnections,
    udpMaxUnconfirmedSessions: settings.udpMaxUnconfirmedSessions,
    kernelBlocking: { mode: settings.kernelBlocking, escalationFactor: settings.kernelBlockingEscalationFactor },
    earlyRefusalEngine: settings.earlyRefusalEngine,
    http1FrontEnd: settings.http1FrontEnd,
    clientAddress: { trustedProxies: settings.trustedProxies, listenerProxyProtocol: settings.listenerProxyProtocol },
    origins: { policy: originPolicy, resolverServers: settings.originResolver },
    crls: (caCertificateIds) => store.crlCache.list(caCertificateIds),
    acmeChallenge: challenges.challengeResponse,
    acmeTlsAlpn: challenges.alpnChallengeCertificate,
    insightWrites: insightWriter,
    insightWholeEventsPerMinute: settings.insightWholeEventsPerMinute,
    appDdos: {
      factor: settings.appDdosFactor,
      minRate: settings.appDdosMinRate,
      baselineHalfLifeSeconds: settings.appDdosBaselineMinutes * 60,
      quietSeconds: settings.appDdosQuietSeconds,
      challengeBits: settings.appDdosChallengeBits,
      clearanceSeconds: settings.appDdosClearanceSeconds,
      maxUnsolved: settings.appDdosMaxUnsolved,
      blockSeconds: settings.appDdosBlockSeconds,
    },
    ...(settings.accessLog !== undefined && { accessLog: { destination: settings.accessLog, sample: settings.accessLogSample } }),
    ...(eventSinks && { eventSinks }),
  });
  await edge.start();
  return edge;
}

/**
 * The node's budget of edge connections: TPS_EDGE_MAX_CONNECTIONS, or derived from the soft
 * file-descriptor limit (src/edge/runtime/fd-budget.ts). `withApi`: this process runs the API
 * listener too, whose connection cap is kept in reserve.
 */
function edgeConnectionBudget(settings: Settings, withApi: boolean): EdgeBudget {
  let limits: string | undefined;
  try {
    limits = fs.readFileSync('/proc/self/limits', 'utf8');
  } catch {
    limits = undefined; // not Linux: the fallback budget
  }
  try {
    return edgeBudget({
      configured: settings.edgeMaxConnections,
      fdLimit: limits === undefined ? undefined : parseOpenFilesLimit(limits),
      apiMaxConnections: withApi ? settings.apiMaxConnections : 0,
      metricsMaxConnections: settings.metricsMaxConnections,
    });
  } catch (error) {
    if (error instanceof EdgeBudgetError) throw new SettingsError(error.message);
    throw error;
  }
}

/**
 * The guard of the control plane's own fetches on a tenant's behalf (CRLs): the same policy and
 * resolver as the edge's; a refusal is counted and logged.
 */
function originGuardFor(policy: OriginPolicy, settings: Settings, logger: EdgeLogger, metrics: Metrics): OriginGuard {
  const refused = new Counter({
    name: 'tps_origin_refused_total',
    help: "Connections the control plane was asked to make on a tenant's behalf (CRL fetches) that the origin policy refused, by class of address.",
    labelNames: ['scope', 'reason'],
    registers: [metrics.registry],
  });
  return new OriginGuard(policy, createOriginResolver(settings.originResolver), (refusal) => {
    refused.inc({ scope: refusal.scope, reason: refusal.reason });
    logger.warn(
      { scope: refusal.scope, host: refusal.host, address: refusal.address, port: refusal.port, reason: refusal.reason },
      'origin refused by the origin policy',
    );
  });
}

/**
 * The node is healthy while its store answers and its edge (when it runs one) serves every
 * configuration it holds in every worker; warnings (a threat feed enabled without a source) do
 * not make it unhealthy. Cheap: one `SELECT 1` and the supervisor's memory.
 */
async function nodeHealth(store: Store, edge: EdgeSupervisor | undefined): Promise<HealthReport> {
  let storeOk = true;
  try {
    await store.db.one('SELECT 1 AS ok');
  } catch {
    storeOk = false;
  }
  const report: HealthReport = { ok: storeOk, store: storeOk ? 'ok' : 'unreachable' };
  if (edge !== undefined) {
    const health = edge.health();
    report.ok = storeOk && health.ok;
    report.edge = { configurations: health.configurations, notServed: health.notServed, notServedCount: health.notServedCount };
    if (health.warnings.length > 0) report.warnings = health.warnings;
  }
  return report;
}
