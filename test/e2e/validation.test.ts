/**
 * Bad input: every error the API names, as JSON:API error objects pointing at the offending field,
 * and the rule behind all of them: a rejected request changes nothing.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTps, createTenant, type Tps, type StoreKind } from '../support/tps.ts';
import { TenantApi, type Answer, type ErrorBody } from '../support/api-client.ts';
import { TestCa } from '../support/pki.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const DAY = 24 * 3600 * 1000;

function assertError(answer: Answer, status: number, code: string, pointer?: string): void {
  assert.equal(answer.status, status, JSON.stringify(answer.body));
  assert.equal(answer.headers.get('content-type'), 'application/vnd.api+json; charset=utf-8');
  const errors = (answer.body as ErrorBody).errors;
  const match = errors.find((error) => error.code === code && (pointer === undefined || error.source?.pointer === pointer));
  assert.ok(match, `expected ${code} at ${pointer ?? '(any)'}, got ${JSON.stringify(errors)}`);
  assert.equal(match.status, String(status));
  assert.ok(match.title && match.detail);
  assert.ok(!JSON.stringify(answer.body).includes('    at '), 'never a stack trace');
}

const httpProxy = (attributes: Record<string, unknown> = {}, frontend: Record<string, unknown> = {}) => ({
  data: {
    type: 'httpProxy',
    attributes: {
      frontend: { ipv4: '127.0.0.2', port: 8100, ...frontend },
      backend: { hosts: [{ address: '127.0.0.20', port: 8080 }] },
      ...attributes,
    },
  },
});

for (const store of ['sqlite', 'postgres'] as StoreKind[]) {
  describe(`traffic configuration errors (${store} store)`, () => {
    let tps: Tps;
    let api: TenantApi;
    let other: TenantApi;

    before(async () => {
      tps = await startTps({ store, env: { TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
      api = await TenantApi.connect(tps, await createTenant(tps));
      other = await TenantApi.connect(tps, await createTenant(tps));
    });
    after(() => tps.stop());

    it('refuses a port already taken on the same IP and protocol (409), and allows it elsewhere', async () => {
      const first = await api.call('POST', CONFIGS, httpProxy({}, { port: 8200 }));
      assert.equal(first.status, 201);
      assertError(await api.call('POST', CONFIGS, httpProxy({}, { port: 8200 })), 409, 'PORT_IN_USE', '/data/attributes/frontend/port');
      // Another tenant on the shared IP pool clashes too: the port is taken on the machine.
      assertError(await other.call('POST', CONFIGS, httpProxy({}, { port: 8200 })), 409, 'PORT_IN_USE', '/data/attributes/frontend/port');
      assert.equal((await api.call('POST', CONFIGS, httpProxy({}, { port: 8200, ipv4: '127.0.0.3' }))).status, 201);
      const udp = await api.call('POST', CONFIGS, {
        data: {
          type: 'l4Proxy',
          attributes: {
            frontend: { ipv4: '127.0.0.2', port: 8200 },
            backend: { hosts: [{ address: '127.0.0.20', port: 53 }] },
            protocols: ['UDP'],
          },
        },
      });
      assert.equal(udp.status, 201, 'the same port over UDP is another binding');
      const deleted = await api.call('DELETE', `${CONFIGS}/${first.body.data.id}`);
      assert.equal(deleted.status, 204);
      assert.equal((await api.call('POST', CONFIGS, httpProxy({}, { port: 8200 }))).status, 201, 'DELETE frees the port');
    });

    it('a PATCH with one bad field leaves the stored configuration as it was', async () => {
      const created = await api.call('POST', CONFIGS, httpProxy({ waf: { mode: 'BLOCKING', paranoiaLevel: 2 } }, { port: 8300 }));
      const id = created.body.data.id as string;
      const before = await api.get(`${CONFIGS}/${id}`);
      const bad = await api.call('PATCH', `${CONFIGS}/${id}`, {
        data: { type: 'httpProxy', attributes: { waf: { paranoiaLevel: 3 }, backend: { hosts: [{ address: '127.0.0.21', port: 0 }] } } },
      });
      assertError(bad, 422, 'INVALID_VALUE', '/data/attributes/backend/hosts/0/port');
      const clash = await api.call('POST', CONFIGS, httpProxy({}, { port: 8301 }));
      assert.equal(clash.status, 201);
      assertError(
        await api.call('PATCH', `${CONFIGS}/${id}`, {
          data: { type: 'httpProxy', attributes: { frontend: { port: 8301 }, waf: { paranoiaLevel: 4 } } },
        }),
        409,
        'PORT_IN_USE',
        '/data/attributes/frontend/port',
      );
      const after = await api.get(`${CONFIGS}/${id}`);
      assert.deepEqual(after.body, before.body);

      const good = await api.call('PATCH', `${CONFIGS}/${id}`, { data: { type: 'httpProxy', attributes: { waf: { paranoiaLevel: 3 } } } });
      assert.equal(good.status, 200);
      assert.deepEqual(good.body.data.attributes.waf, {
        mode: 'BLOCKING',
        paranoiaLevel: 3,
        failMode: 'CLOSED',
        logMatchedData: false,
        ruleExclusions: [],
      });
      const removed = await api.call('PATCH', `${CONFIGS}/${id}`, {
        data: { type: 'httpProxy', attributes: { rateLimiting: { thresholds: [{ requests: 5, periodSeconds: 1 }], blockSeconds: 1 } } },
      });
      assert.equal(removed.status, 200);
      const cleared = await api.call('PATCH', `${CONFIGS}/${id}`, { data: { type: 'httpProxy', attributes: { rateLimiting: null } } });
      assert.equal(cleared.body.data.attributes.rateLimiting, undefined, 'null removes an optional attribute');
    });
  });
}

describe('request errors', () => {
  let tps: Tps;
  let api: TenantApi;
  let other: TenantApi;

  before(async () => {
    tps = await startTps({ env: { TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    api = await TenantApi.connect(tps, await createTenant(tps));
    other = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(() => tps.stop());

  const post = (body: unknown) => api.call('POST', CONFIGS, body);

  it('points at each invalid attribute (422)', async () => {
    const cases: [unknown, string][] = [
      [httpProxy({}, { ipv4: '127.0.0.99' }), '/data/attributes/frontend/ipv4'],
      [httpProxy({}, { ipv4: 'not-an-ip' }), '/data/attributes/frontend/ipv4'],
      [httpProxy({}, { port: 0 }), '/data/attributes/frontend/port'],
      [httpProxy({}, { port: '80' }), '/data/attributes/frontend/port'],
      [httpProxy({ waf: { paranoiaLevel: 5 } }), '/data/attributes/waf/paranoiaLevel'],
      [httpProxy({ waf: { paranoiaLevel: 0 } }), '/data/attributes/waf/paranoiaLevel'],
      [httpProxy({ waf: { mode: 'BLOCK' } }), '/data/attributes/waf/mode'],
      [httpProxy({ geoFencing: { mode: 'BLOCK_LISTED', countries: ['UK'] } }), '/data/attributes/geoFencing/countries/0'],
      [httpProxy({ geoFencing: { mode: 'BLOCK_LISTED', countries: ['de'] } }), '/data/attributes/geoFencing/countries/0'],
      [httpProxy({ geoFencing: { mode: 'DENY', countries: ['DE'] } }), '/data/attributes/geoFencing/mode'],
      [httpProxy({ rateLimiting: { thresholds: [], blockSeconds: 10 } }), '/data/attributes/rateLimiting/thresholds'],
      [
        httpProxy({ rateLimiting: { thresholds: [{ requests: 0, periodSeconds: 1 }], blockSeconds: 10 } }),
        '/data/attributes/rateLimiting/thresholds/0/requests',
      ],
      [httpProxy({ backend: { hosts: [] } }), '/data/attributes/backend/hosts'],
      [httpProxy({ backend: { hosts: [{ address: 'not a host!', port: 80 }] } }), '/data/attributes/backend/hosts/0/address'],
      [httpProxy({ backend: { hosts: [{ address: '127.0.0.20', port: 70000 }] } }), '/data/attributes/backend/hosts/0/port'],
      [
        httpProxy({ backend: { hosts: [{ address: '127.0.0.20', port: 80 }], deliveryMethod: 'RANDOM' } }),
        '/data/attributes/backend/deliveryMethod',
      ],
      [httpProxy({ backend: { hosts: [{ address: '127.0.0.20' }] } }), '/data/attributes/backend/hosts/0/port'],
      [httpProxy({ wafMode: 'BLOCKING' }), '/data/attributes/wafMode'],
      [httpProxy({}, { ipv4: undefined }), '/data/attributes/frontend'],
      [{ data: { type: 'tcpProxy', attributes: {} } }, '/data/type'],
      [
        {
          data: {
            type: 'l4Proxy',
            attributes: {
              frontend: { ipv4: '127.0.0.2', port: 9 },
              backend: { hosts: [{ address: '127.0.0.20', port: 9 }] },
              protocols: ['SCTP'],
            },
          },
        },
        '/data/attributes/protocols/0',
      ],
      [
        {
          data: {
            type: 'l4Proxy',
            attributes: {
              frontend: { ipv4: '127.0.0.2', port: 9 },
              backend: { hosts: [{ address: '127.0.0.20', port: 9 }] },
              proxyProtocol: { enabled: true, version: 3 },
            },
          },
        },
        '/data/attributes/proxyProtocol/version',
      ],
      [httpProxy({}, { certificateId: '00000000-0000-4000-8000-000000000000' }), '/data/attributes/frontend/certificateId'],
      [
        httpProxy({
          backend: { hosts: [{ address: '127.0.0.20', port: 443 }], tlsSettings: { verifyCertificate: { mode: 'CUSTOM_TRUSTSTORE' } } },
        }),
        '/data/attributes/backend/tlsSettings/verifyCertificate/caCertificateIds',
      ],
      [
        httpProxy({
          backend: {
            hosts: [{ address: '127.0.0.20', port: 443 }],
            tlsSettings: { verifyCertificate: { mode: 'CUSTOM_TRUSTSTORE', caCertificateIds: ['00000000-0000-4000-8000-000000000000'] } },
          },
        }),
        '/data/attributes/backend/tlsSettings/verifyCertificate/caCertificateIds/0',
      ],
      [httpProxy({ waf: { ruleExclusions: [{ ruleIds: [], target: 'ARGS:q' }] } }), '/data/attributes/waf/ruleExclusions/0/ruleIds'],
    ];
    for (const [body, pointer] of cases) {
      const answer = await post(body);
      assert.equal(answer.status, 422, `${pointer}: ${JSON.stringify(answer.body)}`);
      assert.ok(
        (answer.body as ErrorBody).errors.some((error) => error.source?.pointer === pointer),
        `expected an error at ${pointer}, got ${JSON.stringify(answer.body)}`,
      );
    }
    const listed = await api.get(CONFIGS);
    assert.deepEqual(listed.body.data, [], 'no rejected request stored anything');
  });

  it('answers 415 for another content type and 400 for malformed JSON', async () => {
    assertError(await api.call('POST', CONFIGS, httpProxy(), { contentType: 'application/json' }), 415, 'UNSUPPORTED_MEDIA_TYPE');
    assertError(await api.call('POST', CONFIGS, undefined, { rawBody: '{"data": {"type": "httpProxy",' }), 400, 'MALFORMED_BODY');
    assertError(await api.call('POST', CONFIGS, undefined, { rawBody: '' }), 400, 'MALFORMED_BODY');
    assertError(
      await api.call('POST', CONFIGS, undefined, { rawBody: 'data=1', contentType: 'text/plain' }),
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    );
  });

  it('refuses to change the type or id of a configuration (409)', async () => {
    const created = await post(httpProxy({}, { port: 8400 }));
    const id = created.body.data.id as string;
    assertError(
      await api.call('PUT', `${CONFIGS}/${id}`, {
        data: {
          type: 'l4Proxy',
          attributes: { frontend: { ipv4: '127.0.0.2', port: 8400 }, backend: { hosts: [{ address: '127.0.0.20', port: 1 }] } },
        },
      }),
      409,
      'TYPE_MISMATCH',
      '/data/type',
    );
    const body = httpProxy({}, { port: 8400 });
    assertError(
      await api.call('PUT', `${CONFIGS}/${id}`, { data: { ...body.data, id: '00000000-0000-4000-8000-000000000000' } }),
      409,
      'ID_MISMATCH',
      '/data/id',
    );
  });

  it("hides another tenant's resources (404) and refuses another tenant's filter (403)", async () => {
    const created = await post(httpProxy({}, { port: 8500 }));
    const id = created.body.data.id as string;
    assertError(await other.get(`${CONFIGS}/${id}`), 404, 'NOT_FOUND');
    assertError(await other.call('PUT', `${CONFIGS}/${id}`, httpProxy({}, { port: 8501 })), 404, 'NOT_FOUND');
    assertError(
      await other.call('PATCH', `${CONFIGS}/${id}`, { data: { type: 'httpProxy', attributes: { waf: { paranoiaLevel: 4 } } } }),
      404,
      'NOT_FOUND',
    );
    assertError(await other.call('DELETE', `${CONFIGS}/${id}`), 404, 'NOT_FOUND');
    assert.deepEqual((await other.get(CONFIGS)).body.data, []);
    assertError(await other.get(`/api/v1/traffic-mgmt/accounts/${api.tenantId}/ips`), 404, 'NOT_FOUND');
    const insight = await other.get(`/api/v2/insight/http-security-events?filter[tenantId]=${api.tenantId}`);
    assertError(insight, 403, 'FOREIGN_TENANT');
    assert.equal(insight.body.errors[0].source.parameter, 'filter[tenantId]');
    assert.equal((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.waf.paranoiaLevel, 1, 'nothing changed');

    const root = await TestCa.create();
    const leaf = await root.issue({ commonName: 'a.example', dnsNames: ['a.example'] });
    const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    assertError(await other.get(`/api/v2/traffic-mgmt/certificates/${certificate.body.data.id}`), 404, 'NOT_FOUND');
    assertError(
      await other.call('POST', CONFIGS, httpProxy({}, { port: 8502, certificateId: certificate.body.data.id })),
      422,
      'UNKNOWN_CERTIFICATE',
      '/data/attributes/frontend/certificateId',
    );
    assertError(
      await other.call('POST', CONFIGS, {
        data: { ...httpProxy({}, { port: 8503 }).data, relationships: { belongsTo: { data: { type: 'account', id: api.tenantId } } } },
      }),
      403,
      'FOREIGN_ACCOUNT',
      '/data/relationships/belongsTo/data/id',
    );
  });

  it('checks an uploaded chain and says which check failed (422)', async () => {
    const root = await TestCa.create();
    const intermediate = await root.intermediate('Intermediate');
    const stranger = await TestCa.create('Somebody Else');
    const good = await intermediate.issue({ commonName: 'a.example', dnsNames: ['a.example'] });
    const otherKey = await intermediate.issue({ commonName: 'b.example' });
    const weak = await intermediate.issue({ commonName: 'weak.example', key: 'rsa1024' });
    const expired = await intermediate.issue({
      commonName: 'old.example',
      notBefore: new Date(Date.now() - 400 * DAY),
      notAfter: new Date(Date.now() - 30 * DAY),
    });
    const future = await intermediate.issue({
      commonName: 'new.example',
      notBefore: new Date(Date.now() + 30 * DAY),
      notAfter: new Date(Date.now() + 400 * DAY),
    });
    const upload = (attributes: Record<string, string>) =>
      api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', { data: { type: 'certificate', attributes } });
    const chain = intermediate.chainPem;
    assertError(
      await upload({ certificate: good.certificatePem, intermediateCertificates: chain, privateKey: otherKey.privateKeyPem }),
      422,
      'KEY_MISMATCH',
      '/data/attributes/privateKey',
    );
    assertError(
      await upload({ certificate: good.certificatePem, intermediateCertificates: stranger.certificatePem, privateKey: good.privateKeyPem }),
      422,
      'CHAIN_BROKEN',
      '/data/attributes/intermediateCertificates',
    );
    assertError(
      await upload({ certificate: expired.certificatePem, intermediateCertificates: chain, privateKey: expired.privateKeyPem }),
      422,
      'CERTIFICATE_EXPIRED',
      '/data/attributes/certificate',
    );
    assertError(
      await upload({ certificate: future.certificatePem, intermediateCertificates: chain, privateKey: future.privateKeyPem }),
      422,
      'CERTIFICATE_NOT_YET_VALID',
      '/data/attributes/certificate',
    );
    assertError(
      await upload({ certificate: weak.certificatePem, intermediateCertificates: chain, privateKey: weak.privateKeyPem }),
      422,
      'WEAK_KEY',
      '/data/attributes/privateKey',
    );
    assertError(
      await upload({ certificate: 'hello', privateKey: good.privateKeyPem }),
      422,
      'INVALID_CERTIFICATE',
      '/data/attributes/certificate',
    );
    assertError(
      await upload({ certificate: good.certificatePem, privateKey: 'hello' }),
      422,
      'INVALID_PRIVATE_KEY',
      '/data/attributes/privateKey',
    );
    assertError(await upload({ certificate: good.certificatePem }), 422, 'INVALID_VALUE', '/data/attributes/privateKey');
    assert.deepEqual(
      (await api.get('/api/v2/traffic-mgmt/certificates')).body.data.filter((c: any) => c.attributes.subject !== 'CN=a.example'),
      [],
    );

    // The spec names GET for the upload: a GET carrying the document works the same way.
    const viaGet = await api.call('GET', '/api/v2/traffic-mgmt/certificates/pem', undefined, {
      rawBody: JSON.stringify({
        data: {
          type: 'certificate',
          attributes: { certificate: good.certificatePem, intermediateCertificates: chain, privateKey: good.privateKeyPem },
        },
      }),
    });
    assert.equal(viaGet.status, 201, JSON.stringify(viaGet.body));
    assert.equal(viaGet.body.data.attributes.issuer, 'CN=Intermediate');
  });

  it('refuses CA uploads that are not CA certificates, and deleting certificates a proxy uses (409)', async () => {
    const root = await TestCa.create();
    const leaf = await root.issue({ commonName: 'leaf.example', dnsNames: ['leaf.example'] });
    const notCa = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: {
        type: 'caCertificate',
        attributes: { certificates: [{ certificate: root.certificatePem }, { certificate: leaf.certificatePem }] },
      },
    });
    assertError(notCa, 422, 'NOT_A_CA_CERTIFICATE', '/data/attributes/certificates/1/certificate');
    assertError(
      await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
        data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem, crlUrl: 'ftp://x/crl' }] } },
      }),
      422,
      'INVALID_VALUE',
      '/data/attributes/certificates/0/crlUrl',
    );
    const ca = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem }] } },
    });
    assert.equal(ca.status, 201);
    const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    const proxy = await api.call(
      'POST',
      CONFIGS,
      httpProxy(
        {},
        {
          port: 8600,
          certificateId: certificate.body.data.id,
          clientCertificateVerification: { mode: 'VERIFY_AND_FORWARD', caCertificateIds: [ca.body.data.id] },
        },
      ),
    );
    assert.equal(proxy.status, 201, JSON.stringify(proxy.body));
    const inUse = await api.call('DELETE', `/api/v2/traffic-mgmt/certificates/${certificate.body.data.id}`);
    assertError(inUse, 409, 'IN_USE');
    assert.match(inUse.body.errors[0].detail, new RegExp(proxy.body.data.id));
    assertError(await api.call('DELETE', `/api/v2/traffic-mgmt/ca-certificates/${ca.body.data.id}`), 409, 'IN_USE');
    assert.equal((await api.call('DELETE', `${CONFIGS}/${proxy.body.data.id}`)).status, 204);
    assert.equal((await api.call('DELETE', `/api/v2/traffic-mgmt/certificates/${certificate.body.data.id}`)).status, 204);
    assert.equal((await api.call('DELETE', `/api/v2/traffic-mgmt/ca-certificates/${ca.body.data.id}`)).status, 204);
    assertError(await api.call('DELETE', `/api/v2/traffic-mgmt/ca-certificates/${ca.body.data.id}`), 404, 'NOT_FOUND');
  });

  it('mutual TLS needs HTTPS on the front end', async () => {
    const root = await TestCa.create();
    const ca = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem }] } },
    });
    assertError(
      await post(
        httpProxy({}, { port: 8700, clientCertificateVerification: { mode: 'VERIFY_AND_REJECT', caCertificateIds: [ca.body.data.id] } }),
      ),
      422,
      'TLS_REQUIRED',
      '/data/attributes/frontend/clientCertificateVerification',
    );
  });

  it('answers unknown routes and ids with JSON:API 404s', async () => {
    assertError(await api.get('/api/v2/traffic-mgmt/nothing-here'), 404, 'NOT_FOUND');
    assertError(await api.get(`${CONFIGS}/00000000-0000-4000-8000-000000000000`), 404, 'NOT_FOUND');
    const notUuid = await api.get(`${CONFIGS}/123`);
    assert.equal(notUuid.status, 400);
    assert.equal(notUuid.body.errors[0].source.parameter, 'id');
  });
});

describe('API call rate limit', () => {
  let tps: Tps;
  after(() => tps?.stop());

  it('answers 429 with Retry-After past the per-account limit', async () => {
    tps = await startTps({ env: { TPS_API_RATE_LIMIT_PER_MINUTE: '5' } });
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const statuses: number[] = [];
    let last: Answer | undefined;
    for (let i = 0; i < 7; i++) {
      last = await api.get(CONFIGS);
      statuses.push(last.status);
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429]);
    assertError(last!, 429, 'TOO_MANY_REQUESTS');
    assert.ok(Number(last!.headers.get('retry-after')) >= 1);
    const second = await TenantApi.connect(tps, await createTenant(tps));
    assert.equal((await second.get(CONFIGS)).status, 200, 'each service account has its own budget');
  });
});
