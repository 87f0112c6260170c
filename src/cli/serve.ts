/**
 * `tps serve`: the control plane (API, token issuer, docs) and, unless TPS_EDGE=false, the edge in
 * the same process; `tps edge`: an edge node alone. Both serve /metrics and /healthz on the
 * operators' listener (TPS_METRICS_LISTEN).
 */
import fs from 'node:fs';
import crypto from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import type { Settings } from '../config/settings.ts';
import { openStore, type Store } from '../store/index.ts';
import { SecretBox } from '../certs/secret-box.ts';
import { AcmeService } from '../certs/acme.ts';
import { CrlService } from '../certs/crl.ts';
import { TokenIssuer } from '../auth/token-issuer.ts';
import { buildApiServer, type PublicUrls } from '../api/server.ts';
import { createMetrics, type Metrics } from '../metrics.ts';
import { startMetricsListener, type MetricsListener } from '../metrics-listener.ts';
import { EdgeSupervisor, type EdgeLogger } from '../edge/runtime/supervisor.ts';
import { AcmeChallengeResponder } from '../certs/acme-challenges.ts';
import { crlsFor } from '../certs/crl.ts';
import type { Scope } from '../store/service-accounts.ts';

export interface RunningService {
  urls: PublicUrls;
  /** The operators' listener: /metrics and /healthz. */
  metricsUrl: string;
  store: Store;
  edge: EdgeSupervisor | undefined;
  close(): Promise<void>;
}

export async function serve(settings: Settings, options: { demo?: boolean } = {}): Promise<RunningService> {
  const store = await openStore(settings);
  const secrets = SecretBox.fromSettings(settings);
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
  const crl = new CrlService({ store, logger: app.log, refreshIntervalMs: settings.crlRefreshSeconds * 1000 });
  await app.listen({ host: settings.apiListen.host, port: settings.apiListen.port });

  const address = app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const ownUrl = `http://${host}:${address.port}`;
  urls.baseUrl ||= ownUrl;
  urls.authUrl ||= ownUrl;

  const edge = settings.edge ? await startEdge(settings, store, secrets, metrics, app.log) : undefined;
  acme?.start();
  crl.start();
  const operators = await startMetricsListener({ listen: settings.metricsListen, metrics, health: () => storeHealth(store) });

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
    close: async () => {
      await operators.close();
      await edge?.stop();
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
  const metrics = createMetrics();
  const edge = await startEdge(settings, store, secrets, metrics, logger);
  const operators: MetricsListener = await startMetricsListener({ listen: settings.metricsListen, metrics, health: () => storeHealth(store) });
  logger.info({ nodeId: settings.nodeId, metricsUrl: operators.url, store: store.db.dialect }, 'tps edge ready');
  return {
    metricsUrl: operators.url,
    close: async () => {
      await operators.close();
      await edge.stop();
      await store.close();
    },
  };
}

export async function startEdge(settings: Settings, store: Store, secrets: SecretBox, metrics: Metrics, logger: EdgeLogger): Promise<EdgeSupervisor> {
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
    clientAddress: { trustedProxies: settings.trustedProxies, listenerProxyProtocol: settings.listenerProxyProtocol },
    crls: (caCertificateIds) => crlsFor(store, caCertificateIds),
    acmeChallenge: challenges.challengeResponse,
    acmeTlsAlpn: (servername) => challenges.alpnChallengeCertificate(servername),
  });
  await edge.start();
  return edge;
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
