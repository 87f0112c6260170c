/**
 * Hostile input at the control plane's edges, against a started `tps serve` over real sockets:
 * the portal's session check decides on the route the router matched (an encoded path gets the
 * same 401 as the plain one); the origin policy words every refused address alike (an address of
 * the service itself reads like any private one, so a tenant cannot map the service's hosts);
 * without an ACME service, orders are refused and nothing is stored; a pending order's claim on
 * its names ends (TPS_ACME_CLAIM_SECONDS), and the name is free for another tenant; CRL fetches
 * run in a lane per tenant, so one tenant's hanging distribution points do not hold another's CRL.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTps, createTenant, openStoreOf, ACME_DIRECTORY_UNREACHABLE, type Tps } from '../../support/tps.ts';
import { waitFor } from '../../support/wait.ts';
import { TenantApi, request, type ErrorBody } from '../../support/api-client.ts';
import { TestCa } from '../../support/pki.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const CA_CERTIFICATES = '/api/v2/traffic-mgmt/ca-certificates';
const CERTIFICATES = '/api/v2/traffic-mgmt/certificates';
/** A front-end IP of the pool: an address of the service itself, inside the allowed networks. */
const FRONTEND = '127.0.0.2';

/** The errors of an answer with their pointers taken out: what is left must not tell them apart. */
function withoutPointers(body: ErrorBody): unknown[] {
  return body.errors.map(({ source, ...rest }) => ({ ...rest, source: { ...source, pointer: undefined } }));
}

describe('control-plane leftovers', () => {
  let tps: Tps;
  let api: TenantApi;

  before(async () => {
    // Loopback is open for origins, so the front-end IP is refused only for being the service's own.
    tps = await startTps({ env: { TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(() => tps?.stop());

  describe('the portal session check, on the matched route', () => {
    const paths = ['session', 'service-accounts', 'insight/events', 'insight/dashboard'];
    for (const path of paths) {
      it(`answers /portal/%61pi/${path} as /portal/api/${path}: 401 without a session`, async () => {
        const plain = await request(`${tps.url}/portal/api/${path}`);
        assert.equal(plain.status, 401, JSON.stringify(plain.body));
        for (const spelled of [`/portal/%61pi/${path}`, `/portal/ap%69/${path}`, `/portal/%61%70%69/${path}`]) {
          const encoded = await request(`${tps.url}${spelled}`);
          assert.equal(encoded.status, 401, `${spelled}: ${JSON.stringify(encoded.body)}`);
          assert.equal(encoded.body.errors[0].code, 'NOT_SIGNED_IN');
          assert.equal(encoded.headers.get('cache-control'), 'no-store', `${spelled}: the API's headers too`);
        }
      });
    }

    it('refuses a state-changing call with an encoded path as it refuses the plain one', async () => {
      for (const spelled of ['/portal/api/service-accounts', '/portal/%61pi/service-accounts']) {
        const answer = await request(`${tps.url}${spelled}`, {
          method: 'POST',
          contentType: 'application/json',
          body: { name: 'x', scopes: ['read'] },
        });
        assert.equal(answer.status, 401, `${spelled}: ${JSON.stringify(answer.body)}`);
        assert.equal(answer.body.errors[0].code, 'NOT_SIGNED_IN');
      }
    });
  });

  describe('service-issued certificates with ACME off', () => {
    // startTps runs with TPS_ACME_DIRECTORY_URL=off unless a test sets a directory.
    it('refuses an order with 409 ACME_DISABLED at /data and stores nothing; uploads still work', async () => {
      const ordered = await api.call<ErrorBody>('POST', `${CERTIFICATES}/lets-encrypt`, {
        data: { type: 'certificate', attributes: { domains: ['www.acme-off.example'] } },
      });
      assert.equal(ordered.status, 409, JSON.stringify(ordered.body));
      assert.equal(ordered.body.errors[0]!.code, 'ACME_DISABLED');
      assert.deepEqual(ordered.body.errors[0]!.source, { pointer: '/data' });
      assert.deepEqual((await api.get(CERTIFICATES)).body.data, [], 'nothing was stored');

      const ca = await TestCa.create('Leftovers upload CA');
      const leaf = await ca.issue({ commonName: 'www.acme-off.example', dnsNames: ['www.acme-off.example'] });
      const uploaded = await api.call('POST', `${CERTIFICATES}/pem`, {
        data: {
          type: 'certificate',
          attributes: { certificate: leaf.certificatePem, intermediateCertificates: '', privateKey: leaf.privateKeyPem },
        },
      });
      assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
      assert.equal(uploaded.body.data.attributes.status, 'ISSUED');

      const metrics = await request(`${tps.metricsUrl}/metrics`);
      assert.match(String(metrics.body), /tps_acme_orders_refused_total\{reason="ACME_DISABLED"\} 1/);
    });

    it('refuses to renew a service-issued certificate stored before ACME was turned off', async () => {
      const store = await openStoreOf(tps);
      let id: string;
      try {
        id = (await store.certificates.createAcme(api.tenantId, ['old.acme-off.example'])).id;
      } finally {
        await store.close();
      }
      const renewed = await api.call<ErrorBody>('POST', `${CERTIFICATES}/${id}/renew`);
      assert.equal(renewed.status, 409, JSON.stringify(renewed.body));
      assert.equal(renewed.body.errors[0]!.code, 'ACME_DISABLED');
    });
  });

  describe('origin-policy refusals, one wording', () => {
    it("words an origin at the service's own address as one at a private address", async () => {
      const hosts = [
        { address: FRONTEND, port: 80 }, // the service's own (front-end IP, at any port)
        { address: '10.0.0.1', port: 80 }, // private
        { address: '169.254.169.254', port: 80 }, // link-local
        { address: '2130706434', port: 80 }, // 127.0.0.2 spelled as a number: own again
      ];
      const answer = await api.call<ErrorBody>('POST', CONFIGS, {
        data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONTEND, port: 4001 }, backend: { hosts } } },
      });
      assert.equal(answer.status, 422, JSON.stringify(answer.body));
      assert.deepEqual(
        answer.body.errors.map((error) => error.source?.pointer),
        hosts.map((_host, index) => `/data/attributes/backend/hosts/${index}/address`),
      );
      const [own, ...others] = withoutPointers(answer.body);
      for (const other of others) assert.deepEqual(other, own);
      assert.ok(!/own|service|loopback|private|link-local/i.test(answer.body.errors[0]!.detail), answer.body.errors[0]!.detail);
    });

    it("words a crlUrl at the service's own address as one at a private address", async () => {
      const ca = await TestCa.create('Leftovers CA');
      const crlUrls = [`http://${FRONTEND}/ca.crl`, 'http://10.0.0.1/ca.crl'];
      const answer = await api.call<ErrorBody>('POST', CA_CERTIFICATES, {
        data: {
          type: 'caCertificate',
          attributes: { certificates: crlUrls.map((crlUrl) => ({ certificate: ca.certificatePem, crlUrl })) },
        },
      });
      assert.equal(answer.status, 422, JSON.stringify(answer.body));
      assert.deepEqual(
        answer.body.errors.map((error) => error.source?.pointer),
        crlUrls.map((_url, index) => `/data/attributes/certificates/${index}/crlUrl`),
      );
      const [own, privateOne] = withoutPointers(answer.body);
      assert.deepEqual(privateOne, own);
    });
  });
});

describe('a pending certificate order claims its names for a bounded time', () => {
  let tps: Tps;
  let owner: TenantApi;
  let other: TenantApi;

  before(async () => {
    // A CA no one answers: the order stays PENDING, each attempt failing at once.
    tps = await startTps({ env: { TPS_ACME_DIRECTORY_URL: ACME_DIRECTORY_UNREACHABLE, TPS_ACME_CLAIM_SECONDS: '2' } });
    owner = await TenantApi.connect(tps, await createTenant(tps));
    other = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(() => tps?.stop());

  const order = (tenant: TenantApi, domains: string[]) =>
    tenant.call<any>('POST', `${CERTIFICATES}/lets-encrypt`, { data: { type: 'certificate', attributes: { domains } } });

  it('frees the name for another tenant once the claim ended, and says so on the stale order (FAILED)', async () => {
    const first = await order(owner, ['claimed.leftovers.example']);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.equal(first.body.data.attributes.status, 'PENDING');
    const refused = await order(other, ['claimed.leftovers.example']);
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    assert.equal(refused.body.errors[0].code, 'DOMAIN_CLAIMED');

    // Once the claim ends (waited for as a condition, not a duration), the other tenant's order passes.
    const taken = await waitFor('the claim to end', async () => {
      const answer = await order(other, ['claimed.leftovers.example']);
      if (answer.status === 409) return undefined;
      return answer;
    });
    assert.equal(taken.status, 201, JSON.stringify(taken.body));
    assert.equal(taken.body.data.attributes.status, 'PENDING');

    const stale = await owner.get(`${CERTIFICATES}/${first.body.data.id}`);
    assert.equal(stale.body.data.attributes.status, 'FAILED');
    assert.match(stale.body.data.attributes.statusDetail, /claim on the names ended/);
    // Now the first tenant is the one refused: one holder at a time.
    const back = await owner.call<any>('POST', `${CERTIFICATES}/${first.body.data.id}/renew`);
    assert.equal(back.status, 409, JSON.stringify(back.body));
    assert.equal(back.body.errors[0].code, 'DOMAIN_CLAIMED');
  });
});

describe("CRL fetches: one tenant's slow distribution points do not delay another tenant's CRL", () => {
  const SLOW_IP = '127.0.63.1';
  const FAST_IP = '127.0.63.2';
  let tps: Tps;
  let slowTenant: TenantApi;
  let otherTenant: TenantApi;
  let slow: http.Server;
  let fast: http.Server;
  const hanging: http.ServerResponse[] = [];
  let crlPem = '';

  before(async () => {
    slow = http.createServer((_request, response) => void hanging.push(response));
    fast = http.createServer((_request, response) => response.end(crlPem));
    await Promise.all([
      new Promise<void>((resolve) => slow.listen(0, SLOW_IP, resolve)),
      new Promise<void>((resolve) => fast.listen(0, FAST_IP, resolve)),
    ]);
    tps = await startTps({
      env: {
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.63.0/24',
        // A slow server holds a fetch for as long as the timeout allows: the longest there is.
        TPS_CRL_FETCH_TIMEOUT_SECONDS: '300',
        TPS_CRL_FETCHES: '4',
        TPS_CRL_FETCHES_PER_TENANT: '2',
      },
    });
    slowTenant = await TenantApi.connect(tps, await createTenant(tps));
    otherTenant = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(async () => {
    // Hanging fetches would hold the service's shutdown until their timeout.
    for (const response of hanging) response.destroy();
    slow?.closeAllConnections();
    slow?.close();
    fast?.close();
    await tps?.stop();
  });

  const upload = (api: TenantApi, certificatePem: string, crlUrls: string[]) =>
    api.call<any>('POST', CA_CERTIFICATES, {
      data: { type: 'caCertificate', attributes: { certificates: crlUrls.map((crlUrl) => ({ certificate: certificatePem, crlUrl })) } },
    });

  it("fetches the other tenant's new CRL while 50 of the first tenant's hang", async () => {
    const slowCa = await TestCa.create('Slow tenant CA');
    const slowPort = (slow.address() as AddressInfo).port;
    const stuck = await upload(
      slowTenant,
      slowCa.certificatePem,
      Array.from({ length: 50 }, (_, i) => `http://${SLOW_IP}:${slowPort}/crl-${i}.crl`),
    );
    assert.equal(stuck.status, 201, JSON.stringify(stuck.body));
    await waitFor('the slow tenant to fill its lane', async () => hanging.length >= 2);

    const otherCa = await TestCa.create('Other tenant CA');
    crlPem = await otherCa.crlPem();
    const uploaded = await upload(otherTenant, otherCa.certificatePem, [
      `http://${FAST_IP}:${(fast.address() as AddressInfo).port}/ca.crl`,
    ]);
    assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
    const id = uploaded.body.data.id as string;
    const crl = await waitFor(
      "the other tenant's CRL",
      async () => (await otherTenant.get(`${CA_CERTIFICATES}/${id}`)).body.data.attributes.certificates[0].crl?.fetchedAt,
      { timeoutMs: 30_000 },
    );
    assert.ok(crl);
    assert.equal(hanging.length, 2, "the slow tenant's fetches still hang, two at a time: its own lane");
    assert.ok(
      hanging.every((response) => !response.writableEnded),
      'none of them was answered',
    );
  });
});
