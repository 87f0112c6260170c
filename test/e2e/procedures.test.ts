/**
 * The spec's three procedures, as a user runs them against a started `tps serve`, on the embedded
 * SQLite store and on a real PostgreSQL.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startTps, createTenant, ACME_DIRECTORY_UNREACHABLE, type Tps, type StoreKind } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { TestCa } from '../support/pki.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';

for (const store of ['sqlite', 'postgres'] as StoreKind[]) {
  describe(`the spec's procedures (${store} store)`, () => {
    let tps: Tps;
    let api: TenantApi;

    before(async () => {
      tps = await startTps({
        store,
        // The certificate stays PENDING: the procedure's PUT is made while it is.
        env: { TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8', TPS_ACME_DIRECTORY_URL: ACME_DIRECTORY_UNREACHABLE },
      });
      api = await TenantApi.connect(tps, await createTenant(tps));
    });
    after(() => tps.stop());

    /** Steps 1 and 2 of every procedure: an available IP, and a port no proxy uses on it. */
    async function chooseFrontend(wantedPort: number): Promise<{ ip: string; port: number }> {
      const ips = await api.get(`/api/v1/traffic-mgmt/accounts/${api.tenantId}/ips`);
      assert.equal(ips.status, 200);
      const ip = ips.body.data[0].attributes.address as string;
      const configs = await api.get(CONFIGS);
      assert.equal(configs.status, 200);
      const taken = configs.body.data
        .filter((config: any) => config.attributes.frontend.ipv4 === ip)
        .map((config: any) => config.attributes.frontend.port);
      assert.ok(!taken.includes(wantedPort), `port ${wantedPort} is free on ${ip}`);
      return { ip, port: wantedPort };
    }

    it('layer 4 proxy: list IPs, check the port, create the proxy', async () => {
      const { ip, port } = await chooseFrontend(7001);
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'l4Proxy',
          attributes: {
            frontend: { ipv4: ip, port },
            backend: {
              hosts: [
                { address: '127.0.0.10', port: 7001 },
                { address: 'origin.example', port: 7001 },
              ],
            },
            protocols: ['TCP', 'UDP'],
            proxyProtocol: { enabled: true, version: 2 },
          },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.match(created.body.data.id, /^[0-9a-f-]{36}$/);
      assert.equal(created.headers.get('location'), `${CONFIGS}/${created.body.data.id}`);
      assert.equal(created.headers.get('content-type'), 'application/vnd.api+json; charset=utf-8');

      const fetched = await api.get(`${CONFIGS}/${created.body.data.id}`);
      assert.equal(fetched.status, 200);
      const { attributes } = fetched.body.data;
      assert.equal(fetched.body.data.type, 'l4Proxy');
      assert.deepEqual(attributes.frontend, { ipv4: ip, port });
      assert.deepEqual(attributes.protocols, ['TCP', 'UDP']);
      assert.equal(attributes.backend.deliveryMethod, 'LEAST_CONNECTIONS', 'the default delivery method');
      assert.deepEqual(attributes.threatIntelligence, { enabled: true }, 'threat intelligence is on by default');
      assert.ok(['PROVISIONING', 'ACTIVE'].includes(attributes.status));
      assert.deepEqual(fetched.body.data.relationships.belongsTo.data, { type: 'account', id: api.tenantId });

      const ips = await api.get(`/api/v1/traffic-mgmt/accounts/${api.tenantId}/ips`);
      const used = ips.body.data.find((entry: any) => entry.attributes.address === ip).attributes.assignedPorts;
      assert.deepEqual(used, [
        { port, protocol: 'TCP' },
        { port, protocol: 'UDP' },
      ]);
    });

    it('HTTP proxy with a customer certificate: upload the chain, create the proxy with its id', async () => {
      const root = await TestCa.create();
      const intermediate = await root.intermediate('Customer Intermediate CA');
      const leaf = await intermediate.issue({ commonName: 'www.customer.example', dnsNames: ['www.customer.example'] });
      const uploaded = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
        data: {
          type: 'certificate',
          attributes: { certificate: leaf.certificatePem, intermediateCertificates: intermediate.chainPem, privateKey: leaf.privateKeyPem },
        },
      });
      assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
      const certificateId = uploaded.body.data.id as string;
      assert.equal(uploaded.body.data.attributes.source, 'CUSTOMER');
      assert.equal(uploaded.body.data.attributes.subject, 'CN=www.customer.example');
      assert.deepEqual(uploaded.body.data.attributes.subjectAltNames, ['www.customer.example']);
      assert.equal(uploaded.body.data.attributes.fingerprint, leaf.fingerprint256);
      assert.ok(!JSON.stringify(uploaded.body).includes('PRIVATE KEY'), 'the private key is never returned');

      const { ip, port } = await chooseFrontend(7443);
      const created = await api.call('POST', CONFIGS, {
        data: {
          type: 'httpProxy',
          attributes: {
            frontend: { ipv4: ip, port, certificateId },
            backend: { hosts: [{ address: '127.0.0.11', port: 8443 }], tlsSettings: { verifyCertificate: { mode: 'SYSTEM_TRUSTSTORE' } } },
            waf: { mode: 'LOGGING', paranoiaLevel: 2 },
            rateLimiting: { thresholds: [{ requests: 100, periodSeconds: 10 }], blockSeconds: 60 },
            geoFencing: { mode: 'BLOCK_LISTED', countries: ['KP'] },
          },
        },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const fetched = await api.get(`${CONFIGS}/${created.body.data.id}`);
      assert.equal(fetched.body.data.attributes.frontend.certificateId, certificateId);
      assert.deepEqual(fetched.body.data.attributes.waf, {
        mode: 'LOGGING',
        paranoiaLevel: 2,
        failMode: 'CLOSED',
        logMatchedData: false,
        ruleExclusions: [],
      });
      const listed = await api.get('/api/v2/traffic-mgmt/certificates');
      assert.deepEqual(
        listed.body.data.map((certificate: any) => certificate.id),
        [certificateId],
      );

      // Mutual TLS on both segments, by PATCH, as the spec's mutual TLS procedure does.
      const ca = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
        data: {
          type: 'caCertificate',
          // Not 127.0.0.1: with the PostgreSQL store that is the database's host, which the origin policy refuses.
          attributes: { certificates: [{ certificate: root.certificatePem, crlUrl: 'http://127.0.0.19:9/crl.pem' }] },
          relationships: { belongsTo: { data: { type: 'account', id: api.tenantId } } },
        },
      });
      assert.equal(ca.status, 201, JSON.stringify(ca.body));
      const patched = await api.call('PATCH', `${CONFIGS}/${created.body.data.id}`, {
        data: {
          type: 'httpProxy',
          attributes: {
            frontend: {
              clientCertificateVerification: { mode: 'VERIFY_AND_REJECT', caCertificateIds: [ca.body.data.id], verifyCrl: true },
            },
            backend: {
              tlsSettings: {
                clientCertificateId: certificateId,
                verifyCertificate: { mode: 'CUSTOM_TRUSTSTORE', caCertificateIds: [ca.body.data.id] },
              },
            },
          },
        },
      });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      const merged = patched.body.data.attributes;
      assert.equal(merged.frontend.port, port, 'PATCH keeps what it does not name');
      assert.equal(merged.frontend.certificateId, certificateId);
      assert.equal(merged.frontend.clientCertificateVerification.verifyCrl, true);
      assert.deepEqual(merged.backend.hosts, [{ address: '127.0.0.11', port: 8443 }]);
      assert.equal(merged.backend.tlsSettings.verifyCertificate.mode, 'CUSTOM_TRUSTSTORE');
    });

    it('HTTP proxy with a service-issued certificate: port 80, request the certificate, PUT with port 443', async () => {
      const { ip } = await chooseFrontend(80);
      const backend = { hosts: [{ address: '127.0.0.12', port: 8080 }] };
      const created = await api.call('POST', CONFIGS, {
        data: { type: 'httpProxy', attributes: { frontend: { ipv4: ip, port: 80 }, backend } },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const configId = created.body.data.id as string;

      const requested = await api.call('POST', '/api/v2/traffic-mgmt/certificates/lets-encrypt', {
        data: { type: 'certificate', attributes: { domains: ['shop.customer.example'] } },
      });
      assert.equal(requested.status, 201, JSON.stringify(requested.body));
      assert.equal(requested.body.data.attributes.status, 'PENDING');
      assert.equal(requested.body.data.attributes.source, 'ACME');
      const certificateId = requested.body.data.id as string;

      const replaced = await api.call('PUT', `${CONFIGS}/${configId}`, {
        data: { type: 'httpProxy', id: configId, attributes: { frontend: { ipv4: ip, port: 443, certificateId }, backend } },
      });
      assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
      const fetched = await api.get(`${CONFIGS}/${configId}`);
      assert.deepEqual(fetched.body.data.attributes.frontend, { ipv4: ip, port: 443, certificateId });
      // The certificate is still PENDING: the proxy keeps serving port 80 (where the CA validates)
      // until it is issued, so port 80 stays this proxy's meanwhile.
      const held = await api.call('POST', CONFIGS, {
        data: { type: 'httpProxy', attributes: { frontend: { ipv4: ip, port: 80 }, backend } },
      });
      assert.equal(held.status, 409, 'port 80 is held while the certificate is pending');
      assert.equal(held.body.errors[0].code, 'PORT_IN_USE');
    });
  });
}
