/**
 * `tps serve`: the control plane (API, token issuer, docs) and, unless TPS_EDGE=false, the edge in
 * the same process; `tps edge`: an edge node alone. Both serve /metrics and /healthz on the
 * operators' listener (TPS_METRICS_LISTEN).
 */
import fs from 'node:fs';
import crypto from 'node:crypto';
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
import { buildApiServer, type PublicUrls } from '../api/server.ts';
import { createMetrics, type Metrics } from '../metrics.ts';
import { startMetricsListener, type MetricsListener } from '../metrics-listener.ts';
import { EdgeSupervisor, type EdgeLogger } from '../edge/runtime/supervisor.ts';
import { AcmeChallengeResponder } from '../certs/acme-challenges.ts';
import type { Scope } from '../store/service-accounts.ts';
import { OriginPolicy, type OriginPolicySettings } from '../edge/net/origin-policy.ts';
import { OriginGuard } from '../edge/net/origin-guard.ts';
import { createOriginResolver } from '../edge/net/origin-resolver.ts';
import { originPolicySettings, ownHosts } from './own-listeners.ts';
import { InsightWriter } from '../store/insight-writer.ts';

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
  const operators = await startMetricsListener({ listen: settings.metricsListen, metrics, health: () => storeHealth(store) });
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
    registry: metrics.registry,
  });
  // Retention runs on every node, with or without an edge: events may come from other nodes.
  const insightWriter = await startInsightWriter(settings, metrics, app.log);
  const edge = settings.edge ? await startEdge(settings, store, secrets, metrics, app.log, policySettings, insightWriter) : undefined;
  // Orders resumed at start (PENDING across a restart) validate against this node's proxies: let
  // them listen first (bounded: a proxy that cannot bind must not hold the certificates back).
  if (acme && edge && !(await edge.whenApplied(15_000))) app.log.warn({}, 'edge workers not ready after 15 s; starting the ACME service anyway');
  acme?.start();
  crl.start();

  app.log.info(
    { apiUrl: ownUrl, metricsUrl: operators.url, baseUrl: urls.baseUrl, authUrl: urls.authUrl, store: store.db.dialect, edge: settings.edge },
    'tps ready',
  );
  if (options.demo) await printDemo(store, urls);

  return {
    urls,
    metricsUrl: operators.url,
    store,
    edge,
    insightWriter,
    close: async () => {
      await operators.close();
      await edge?.stop();
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
  const store = await openStore(settings);
  const secrets = SecretBox.fromSettings(settings);
  const logger = pino({ level: settings.logLevel });
  await upgradeSealedSecrets(store, secrets, logger);
  const metrics = createMetrics();
  const hosts = await ownHosts(settings);
  const insightWriter = await startInsightWriter(settings, metrics, logger);
  const operators: MetricsListener = await startMetricsListener({ listen: settings.metricsListen, metrics, health: () => storeHealth(store) });
  // This node runs no API; TPS_API_LISTEN names where the cluster's API listens, refused as an origin too.
  const policySettings = originPolicySettings(settings, hosts, [settings.apiListen, operators.address]);
  const edge = await startEdge(settings, store, secrets, metrics, logger, policySettings, insightWriter);
  logger.info({ nodeId: settings.nodeId, metricsUrl: operators.url, store: store.db.dialect }, 'tps edge ready');
  return {
    metricsUrl: operators.url,
    close: async () => {
      await operators.close();
      await edge.stop();
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
): Promise<EdgeSupervisor> {
  const challenges = new AcmeChallengeResponder(store.acmeChallenges);
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
    wafEngine: settings.wafEngine,
    wafBodyLimits: {
      request: settings.wafRequestBodyLimit,
      multipart: settings.wafMultipartBodyLimit,
      response: settings.wafResponseBodyLimit,
      action: settings.wafBodyLimitAction,
    },
    redisUrl: settings.redisUrl,
    rateLimitClientsPerProxy: settings.rateLimitClientsPerProxy,
    ipv6SourcePrefix: settings.rateLimitIpv6Prefix,
    httpConnectionLimits: {
      maxConnectionsPerSource: settings.httpMaxConnectionsPerSource,
      maxNewConnectionsPerSecondPerSource: settings.httpMaxNewConnectionsPerSecondPerSource,
      maxConnections: settings.httpMaxConnections,
    },
    udpReplyBudgetFactor: settings.udpReplyBudgetFactor,
    clientAddress: { trustedProxies: settings.trustedProxies, listenerProxyProtocol: settings.listenerProxyProtocol },
    origins: { policy: originPolicy, resolverServers: settings.originResolver },
    crls: (caCertificateIds) => store.crlCache.list(caCertificateIds),
    acmeChallenge: challenges.challengeResponse,
    acmeTlsAlpn: challenges.alpnChallengeCertificate,
    insightWrites: insightWriter,
    insightWholeEventsPerMinute: settings.insightWholeEventsPerMinute,
  });
  await edge.start();
  return edge;
}

/**
 * The guard of the control plane's own fetches on a tenant's behalf (CRLs): the same policy and
 * resolver as the edge's; a refusal is counted and logged.
 */
function originGuardFor(policy: OriginPolicy, settings: Settings, logger: EdgeLogger, metrics: Metrics): OriginGuard {
  const refused = new Counter({
    name: 'tps_origin_refused_total',
    help: 'Connections the control plane was asked to make on a tenant\'s behalf (CRL fetches) that the origin policy refused, by class of address.',
    labelNames: ['scope', 'reason'],
    registers: [metrics.registry],
  });
  return new OriginGuard(policy, createOriginResolver(settings.originResolver), (refusal) => {
    refused.inc({ scope: refusal.scope, reason: refusal.reason });
    logger.warn({ scope: refusal.scope, host: refusal.host, address: refusal.address, port: refusal.port, reason: refusal.reason }, 'origin refused by the origin policy');
  });
}

/** The node is healthy while its store answers. */
async function storeHealth(store: Store): Promise<{ ok: boolean; store: string }> {
  try {
    await store.db.one('SELECT 1 AS ok');
    return { ok: true, store: 'ok' };
  } catch {
    return { ok: false, store: 'unreachable' };
  }
}

/** Seeds a demo tenant with a fresh service account and prints how to get a token. */
async function printDemo(store: Store, urls: PublicUrls): Promise<void> {
  const tenant = (await store.tenants.findByName('demo')) ?? (await store.tenants.create('demo'));
  const scopes: Scope[] = ['read', 'write', 'insight'];
  const account = await store.serviceAccounts.create(tenant.id, 'demo', scopes);
  // A portal user too, with a fresh password each start (the store keeps only its hash).
  const password = crypto.randomBytes(12).toString('base64url');
  const email = `demo-${crypto.randomBytes(3).toString('hex')}@example.com`;
  await store.portalUsers.create(tenant.id, email, password);
  const body = JSON.stringify({
    client_id: account.clientId,
    client_secret: account.clientSecret,
    grant_type: 'client_credentials',
    audience: urls.baseUrl,
  });
  process.stdout.write(
    [
      '',
      '  Traffic protection service: demo',
      `  API and docs     ${urls.baseUrl}/docs`,
      `  portal           ${urls.baseUrl}/portal   (${email} / ${password})`,
      `  tenant id        ${tenant.id}`,
      `  client id        ${account.clientId}`,
      `  client secret    ${account.clientSecret}   (shown once)`,
      '',
      '  Get an access token:',
      `  curl -s -X POST ${urls.authUrl}/oauth/token -H 'Content-Type: application/json' -d '${body}'`,
      '',
      '  Then list the front-end IPs:',
      `  curl -s ${urls.baseUrl}/api/v1/traffic-mgmt/accounts/${tenant.id}/ips -H "Authorization: Bearer $TOKEN"`,
      '',
      '',
    ].join('\n'),
  );
}
