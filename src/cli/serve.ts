/**
 * `tps serve`: the control plane (API, token issuer, docs, metrics) and, unless TPS_EDGE=false,
 * the edge in the same process.
 */
import type { AddressInfo } from 'node:net';
import type { Settings } from '../config/settings.ts';
import { openStore, type Store } from '../store/index.ts';
import { SecretBox } from '../certs/secret-box.ts';
import { TokenIssuer } from '../auth/token-issuer.ts';
import { buildApiServer, type PublicUrls } from '../api/server.ts';
import { createMetrics } from '../metrics.ts';
import type { Scope } from '../store/service-accounts.ts';

export interface RunningService {
  urls: PublicUrls;
  store: Store;
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
  const app = await buildApiServer({ settings, store, tokens, secrets, metrics, urls });
  await app.listen({ host: settings.apiListen.host, port: settings.apiListen.port });

  const address = app.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const ownUrl = `http://${host}:${address.port}`;
  urls.baseUrl ||= ownUrl;
  urls.authUrl ||= ownUrl;

  app.log.info({ apiUrl: ownUrl, baseUrl: urls.baseUrl, authUrl: urls.authUrl, store: store.db.dialect }, 'tps ready');
  if (options.demo) await printDemo(store, urls);

  return {
    urls,
    store,
    close: async () => {
      await app.close();
      await store.close();
    },
  };
}

/** Seeds a demo tenant with a fresh service account and prints how to get a token. */
async function printDemo(store: Store, urls: PublicUrls): Promise<void> {
  const tenant = (await store.tenants.findByName('demo')) ?? (await store.tenants.create('demo'));
  const scopes: Scope[] = ['read', 'write', 'insight'];
  const account = await store.serviceAccounts.create(tenant.id, 'demo', scopes);
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
