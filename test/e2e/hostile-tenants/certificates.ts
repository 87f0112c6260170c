/**
 * Hostile tenants and service-issued certificates, over real sockets against `tps serve` with the
 * edge and Pebble (which really validates, at the address its DNS gives for each name):
 *
 * - a challenge of one tenant's order is never answered by another tenant's proxy: HTTP-01 on
 *   port 80 gets 404 there, TLS-ALPN-01 a failed handshake; so a name pointing at B's proxy gives
 *   A no certificate (Pebble refuses the order);
 * - a domain one tenant holds a PENDING or ISSUED certificate for is refused to the others (409
 *   DOMAIN_CLAIMED); uploads (CUSTOMER) claim nothing and are never refused;
 * - each tenant orders with an ACME account of its own;
 * - the quota of pending orders (TPS_QUOTA_PENDING_ACME_ORDERS), on a node without an ACME
 *   service, so that orders stay PENDING whatever the timing.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import acme from 'acme-client';
import { startPebble, type Pebble } from '../../support/pebble.ts';
import { startTps, createTenant, openStoreOf, ACME_DIRECTORY_UNREACHABLE, type Tps } from '../../support/tps.ts';
import { TenantApi, request } from '../../support/api-client.ts';
import { TestCa } from '../../support/pki.ts';
import { waitFor } from '../../support/wait.ts';
import type { Store } from '../../../src/store/index.ts';
import { SecretBox, acmeAccountKeyBinding } from '../../../src/certs/secret-box.ts';
import { ACME_TLS_ALPN_PROTOCOL } from '../../../src/edge/http/tls-alpn-acme.ts';

const PEBBLE_IP = '127.0.0.150';
/** Tenant A's front-end IP (where names resolve unless the test says otherwise), and tenant B's. */
const FRONT_A = '127.0.0.151';
const FRONT_B = '127.0.0.152';
const ORIGIN_A = '127.0.0.153';
const ORIGIN_B = '127.0.0.154';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const CERTIFICATES = '/api/v2/traffic-mgmt/certificates';

/** A plain HTTP GET with a Host header of our choosing. */
function get(ip: string, port: number, urlPath: string, host: string): Promise<{ status: number; body: string } | undefined> {
  return new Promise((resolve) => {
    const outgoing = http.get({ host: ip, port, path: urlPath, headers: { host }, agent: false, timeout: 5000 }, (response) => {
      let body = '';
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    outgoing.on('timeout', () => outgoing.destroy());
    outgoing.on('error', () => resolve(undefined));
  });
}

/** A TLS-ALPN-01 validation connection (ALPN acme-tls/1 only): the certificate presented, or the handshake error. */
function validationHandshake(ip: string, servername: string): Promise<{ certificatePem: string } | { error: string }> {
  return new Promise((resolve) => {
    const socket = tls.connect(
      { host: ip, port: 443, servername, ALPNProtocols: [ACME_TLS_ALPN_PROTOCOL], rejectUnauthorized: false },
      () => {
        const certificatePem = socket.getPeerX509Certificate()!.toString();
        socket.destroy();
        resolve({ certificatePem });
      },
    );
    socket.setTimeout(5000, () => socket.destroy(new Error('timed out')));
    socket.on('error', (error) => resolve({ error: error.message }));
  });
}

describe('hostile tenants: certificates only for domains a tenant controls', () => {
  let pebble: Pebble;
  let tps: Tps;
  let store: Store;
  let secrets: SecretBox;
  let tmp: string;
  let apiA: TenantApi;
  let apiB: TenantApi;
  let apiC: TenantApi;
  const origins: http.Server[] = [];
  /** What each origin received (B's origin must never see a challenge it could answer for A). */
  const seen: Record<string, string[]> = { A: [], B: [] };

  const startOrigin = async (name: 'A' | 'B', ip: string) => {
    const server = http.createServer((incoming, response) => {
      seen[name]!.push(`${incoming.method} ${incoming.url}`);
      response.end(`origin ${name}: ${incoming.method} ${incoming.url}`);
    });
    await new Promise<void>((resolve) => server.listen(0, ip, resolve));
    origins.push(server);
    return { hosts: [{ address: ip, port: (server.address() as { port: number }).port }] };
  };

  const waitActive = (api: TenantApi, id: string) =>
    waitFor(`proxy ${id} ACTIVE`, async () =>
      (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined,
    );

  const createProxy = async (api: TenantApi, frontend: Record<string, unknown>, backend: unknown, active = true) => {
    const created = await api.call('POST', CONFIGS, { data: { type: 'httpProxy', attributes: { frontend, backend } } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    if (active) await waitActive(api, created.body.data.id);
    return created.body.data.id as string;
  };

  const upload = async (api: TenantApi, domain: string) => {
    const ca = await TestCa.create(`Self-made CA for ${domain}`);
    const leaf = await ca.issue({ commonName: domain, dnsNames: [domain] });
    const uploaded = await api.call('POST', `${CERTIFICATES}/pem`, {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
    return uploaded.body.data.id as string;
  };

  const order = (api: TenantApi, domains: string[]) =>
    api.call('POST', `${CERTIFICATES}/lets-encrypt`, { data: { type: 'certificate', attributes: { domains } } });

  const settled = (api: TenantApi, id: string) =>
    waitFor(
      `certificate ${id} ISSUED or FAILED`,
      async () => {
        const { attributes } = (await api.get(`${CERTIFICATES}/${id}`)).body.data;
        return attributes.status === 'PENDING' ? undefined : attributes;
      },
      { timeoutMs: 90_000 },
    );

  before(async () => {
    pebble = await startPebble({ ip: PEBBLE_IP, targetIp: FRONT_A, httpPort: 80, tlsPort: 443 });
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-hostile-acme-'));
    fs.writeFileSync(path.join(tmp, 'pebble-https-ca.pem'), pebble.caBundlePem);
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: `${FRONT_A},${FRONT_B}`,
        TPS_ACME_DIRECTORY_URL: pebble.directoryUrl,
        TPS_ACME_EMAIL: 'ops@tps.test',
        TPS_ACME_CA_BUNDLE: path.join(tmp, 'pebble-https-ca.pem'),
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      },
    });
    store = await openStoreOf(tps);
    secrets = SecretBox.fromSettings({ masterKey: undefined, dataDir: tps.env.TPS_DATA_DIR! });
    apiA = await TenantApi.connect(tps, await createTenant(tps));
    apiB = await TenantApi.connect(tps, await createTenant(tps));
    apiC = await TenantApi.connect(tps, await createTenant(tps));

    // A and B each have a plain proxy on port 80 and a TLS proxy on 443 of their own IP.
    const backendA = await startOrigin('A', ORIGIN_A);
    const backendB = await startOrigin('B', ORIGIN_B);
    await createProxy(apiA, { ipv4: FRONT_A, port: 80 }, backendA);
    await createProxy(apiA, { ipv4: FRONT_A, port: 443, certificateId: await upload(apiA, 'site.a.hostile.test') }, backendA);
    await createProxy(apiB, { ipv4: FRONT_B, port: 80 }, backendB);
    await createProxy(apiB, { ipv4: FRONT_B, port: 443, certificateId: await upload(apiB, 'site.b.hostile.test') }, backendB);
  });

  after(async () => {
    await store?.close();
    await tps?.stop();
    await pebble?.stop();
    for (const server of origins) server.close();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it("answers a challenge only on the ordering tenant's proxies (HTTP-01 and TLS-ALPN-01)", async () => {
    // A pending challenge of A's, as the ACME service writes it while A's order runs.
    const keyAuthorization = 'probe-token-a.account-thumbprint';
    const expiresAt = new Date(Date.now() + 600_000).toISOString();
    for (const type of ['http-01', 'tls-alpn-01'] as const) {
      await store.acmeChallenges.put({
        type,
        token: 'probe-token-a',
        tenantId: apiA.tenantId,
        domain: 'probe.hostile.test',
        keyAuthorization,
        certificateId: 'probe',
        expiresAt,
      });
    }
    try {
      const challengePath = '/.well-known/acme-challenge/probe-token-a';
      const fromB = await get(FRONT_B, 80, challengePath, 'probe.hostile.test');
      assert.equal(fromB?.status, 404, "B's proxy does not answer A's challenge");
      assert.ok(!fromB.body.includes(keyAuthorization));
      assert.ok(!seen.B!.some((line) => line.includes('acme-challenge')), "nor does B's origin get the chance");
      assert.deepEqual(
        await get(FRONT_A, 80, challengePath, 'probe.hostile.test'),
        { status: 200, body: keyAuthorization },
        "A's own proxy answers it",
      );

      const alpnFromB = await validationHandshake(FRONT_B, 'probe.hostile.test');
      assert.ok('error' in alpnFromB, `B's TLS proxy presents no challenge certificate for A's order: ${JSON.stringify(alpnFromB)}`);
      const alpnFromA = await validationHandshake(FRONT_A, 'probe.hostile.test');
      assert.ok('certificatePem' in alpnFromA, JSON.stringify(alpnFromA));
      assert.equal(
        acme.crypto.isAlpnCertificateAuthorizationValid(alpnFromA.certificatePem, keyAuthorization),
        true,
        "A's own TLS proxy presents it",
      );
    } finally {
      await store.acmeChallenges.deleteForCertificate('probe');
    }
  });

  it("gives A no certificate for a name that points at B's proxy: HTTP-01 on B's port 80 fails at the CA", async () => {
    const domain = 'victim-http.hostile.test';
    await pebble.addA(domain, FRONT_B);
    const requested = await order(apiA, [domain]);
    assert.equal(requested.status, 201, JSON.stringify(requested.body));
    const outcome = await settled(apiA, requested.body.data.id);
    assert.equal(outcome.status, 'FAILED', 'the CA saw no proof of control');
    assert.match(outcome.statusDetail, /^http-01 validation of victim-http\.hostile\.test failed: /);
    assert.ok(!seen.B!.some((line) => line.includes('acme-challenge')), "B's origin never saw the challenge");
  });

  it("gives C no certificate for a name that points at B's TLS proxy: TLS-ALPN-01 on B's port 443 fails at the CA", async () => {
    // C has no port 80 proxy, only one created with the certificate it orders: the service then
    // validates with TLS-ALPN-01, and the name resolves to B's TLS proxy. (The first attempt, made
    // before C's proxy exists, tries HTTP-01 on B's port 80 and fails too; ordering it again after
    // the proxy exists makes the choice certain.)
    const domain = 'victim-alpn.hostile.test';
    await pebble.addA(domain, FRONT_B);
    const requested = await order(apiC, [domain]);
    assert.equal(requested.status, 201, JSON.stringify(requested.body));
    const certificateId = requested.body.data.id as string;
    assert.equal((await settled(apiC, certificateId)).status, 'FAILED');
    await createProxy(apiC, { ipv4: FRONT_A, port: 8443, certificateId }, { hosts: [{ address: ORIGIN_A, port: 9 }] }, false);
    const again = await apiC.call('POST', `${CERTIFICATES}/${certificateId}/renew`);
    assert.equal(again.status, 202, JSON.stringify(again.body));
    assert.equal(again.body.data.attributes.status, 'PENDING');
    const outcome = await settled(apiC, certificateId);
    assert.equal(outcome.status, 'FAILED', `the CA saw no proof of control: ${JSON.stringify(outcome)}`);
    assert.match(outcome.statusDetail, /^tls-alpn-01 validation of victim-alpn\.hostile\.test failed: /);
  });

  it('refuses a domain another tenant holds a PENDING or ISSUED certificate for (409 DOMAIN_CLAIMED)', async () => {
    const domain = 'shop.a.hostile.test';
    const claimed = await order(apiA, [domain]);
    assert.equal(claimed.status, 201, JSON.stringify(claimed.body));
    const certificateId = claimed.body.data.id as string;

    // At once (PENDING) and once ISSUED: B is refused, pointed at the name.
    for (const phase of ['pending', 'issued']) {
      if (phase === 'issued') assert.equal((await settled(apiA, certificateId)).status, 'ISSUED');
      const refused = await order(apiB, ['www.b.hostile.test', domain]);
      assert.equal(refused.status, 409, `${phase}: ${JSON.stringify(refused.body)}`);
      assert.equal(refused.body.errors.length, 1);
      assert.equal(refused.body.errors[0].code, 'DOMAIN_CLAIMED');
      assert.deepEqual(refused.body.errors[0].source, { pointer: '/data/attributes/domains/1' });
      assert.ok(!JSON.stringify(refused.body).includes(apiA.tenantId), "the claiming tenant's id is not shown");
      // Case and a trailing dot do not make it another name.
      const again = await order(apiB, ['Shop.A.Hostile.Test.']);
      assert.equal(again.status, 409);
      assert.equal(again.body.errors[0].code, 'DOMAIN_CLAIMED');
    }
    assert.ok(
      !(await apiB.get(CERTIFICATES)).body.data.some((certificate: any) => certificate.attributes.domains.includes(domain)),
      'nothing was created for B',
    );

    // A may order the name again (a second certificate of its own).
    const own = await order(apiA, [domain, 'www.a.hostile.test']);
    assert.equal(own.status, 201, JSON.stringify(own.body));

    // Uploads claim nothing and are never refused: B's self-made certificate for A's name is
    // accepted (it only ever serves on B's proxies), and does not block A.
    await upload(apiB, domain);
    await upload(apiB, 'later.a.hostile.test');
    const afterUpload = await order(apiA, ['later.a.hostile.test']);
    assert.equal(afterUpload.status, 201, JSON.stringify(afterUpload.body));

    const metrics = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
    assert.match(metrics, /tps_acme_orders_refused_total\{reason="DOMAIN_CLAIMED"\} [1-9]/);
  });

  it('orders with one ACME account per tenant, each registered at the CA', async () => {
    // B orders a name of its own (it resolves to B's proxy, which answers B's challenge).
    const domain = 'shop.b.hostile.test';
    await pebble.addA(domain, FRONT_B);
    const requested = await order(apiB, [domain]);
    assert.equal(requested.status, 201, JSON.stringify(requested.body));
    const outcome = await settled(apiB, requested.body.data.id);
    assert.equal(outcome.status, 'ISSUED', outcome.statusDetail);

    const accountA = await store.acmeAccounts.get(pebble.directoryUrl, apiA.tenantId);
    const accountB = await store.acmeAccounts.get(pebble.directoryUrl, apiB.tenantId);
    assert.ok(accountA && accountB, 'both tenants have an account');
    assert.notEqual(accountA.accountUrl, accountB.accountUrl);
    assert.ok(!accountA.sealedPrivateKey.includes('PRIVATE KEY'), 'account keys are sealed');
    acme.axios.defaults.httpsAgent = new https.Agent({ ca: pebble.caBundlePem });
    for (const account of [accountA, accountB]) {
      const client = new acme.Client({
        directoryUrl: pebble.directoryUrl,
        accountKey: secrets.open(account.sealedPrivateKey, acmeAccountKeyBinding(pebble.directoryUrl, account.tenantId)),
        accountUrl: account.accountUrl,
      });
      const atCa = await client.updateAccount();
      assert.equal(atCa.status, 'valid', `${account.tenantId}'s account is registered at the CA`);
      assert.deepEqual(atCa.contact, ['mailto:ops@tps.test']);
    }
    assert.equal(
      new Set((await store.acmeAccounts.list(pebble.directoryUrl)).map((account) => account.tenantId)).size,
      3,
      'A, B and C: one each',
    );
  });
});

describe('hostile tenants: the quota of pending service-issued certificate orders', () => {
  let tps: Tps;
  let api: TenantApi;
  let other: TenantApi;

  before(async () => {
    // A CA no one answers: orders stay PENDING (retried after a backoff).
    tps = await startTps({ env: { TPS_ACME_DIRECTORY_URL: ACME_DIRECTORY_UNREACHABLE, TPS_QUOTA_PENDING_ACME_ORDERS: '2' } });
    api = await TenantApi.connect(tps, await createTenant(tps));
    other = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(() => tps?.stop());

  const order = (tenant: TenantApi, domains: string[]) =>
    tenant.call('POST', `${CERTIFICATES}/lets-encrypt`, { data: { type: 'certificate', attributes: { domains } } });

  it('refuses an order past the quota with 409 QUOTA_EXCEEDED at /data, per tenant, until one leaves PENDING', async () => {
    const first = await order(api, ['one.quota.hostile.test']);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.equal((await order(api, ['two.quota.hostile.test'])).status, 201);
    const refused = await order(api, ['three.quota.hostile.test']);
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.equal(refused.body.errors[0].code, 'QUOTA_EXCEEDED');
    assert.deepEqual(refused.body.errors[0].source, { pointer: '/data' });
    assert.match(refused.body.errors[0].detail, /2 service-issued certificate orders pending/);
    assert.equal((await api.get(CERTIFICATES)).body.data.length, 2, 'nothing was created');

    assert.equal((await order(other, ['one.other.hostile.test'])).status, 201, "another tenant's quota is its own");

    const deleted = await api.call('DELETE', `${CERTIFICATES}/${first.body.data.id}`);
    assert.equal(deleted.status, 204);
    assert.equal((await order(api, ['three.quota.hostile.test'])).status, 201);

    const metrics = await request(`${tps.metricsUrl}/metrics`);
    assert.match(String(metrics.body), /tps_acme_orders_refused_total\{reason="QUOTA_EXCEEDED"\} 1/);
  });

  it('takes names differing only in case or a trailing dot as one name (422 DUPLICATE_DOMAIN)', async () => {
    const twice = await order(other, ['twice.hostile.test', 'Twice.Hostile.Test.']);
    assert.equal(twice.status, 422, JSON.stringify(twice.body));
    assert.equal(twice.body.errors[0].code, 'DUPLICATE_DOMAIN');
    assert.deepEqual(twice.body.errors[0].source, { pointer: '/data/attributes/domains/1' });
  });
});
