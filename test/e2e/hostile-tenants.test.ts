/**
 * A hostile tenant against another, over the public API of a started `tps serve` with its edge:
 * its DELETE, PUT and PATCH of the victim's proxies, certificates and CA certificates change
 * nothing (the victim's resources read back the same and its traffic still flows on its port), no
 * sequence of its calls gets it the victim's ip:port, a refused delete names nothing of another
 * tenant, quotas hold (also for concurrent creates at the last slot), and malformed documents get
 * 4xx answers.
 *
 * The points of the same threat model that need their own fixtures live beside this file and run
 * with it: `hostile-tenants/origins.ts` (where the service connects on a tenant's behalf: origins,
 * DNS names resolving inside, CRL URLs, listeners) and `hostile-tenants/certificates.ts` (ACME
 * challenges, claimed domains, per-tenant ACME accounts, the pending-order quota, against Pebble).
 */
import './hostile-tenants/origins.ts';
import './hostile-tenants/certificates.ts';
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { startTps, createTenant, ACME_DIRECTORY_UNREACHABLE, type Tps, type StoreKind } from '../support/tps.ts';
import { TenantApi, type Answer, type ErrorBody } from '../support/api-client.ts';
import { TestCa } from '../support/pki.ts';
import { roundTrip } from '../support/round-trip.ts';
import { waitFor } from '../support/wait.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const CERTIFICATES = '/api/v2/traffic-mgmt/certificates';
const CA_CERTIFICATES = '/api/v2/traffic-mgmt/ca-certificates';
const FRONTEND = '127.0.9.1';
const OTHER_FRONTEND = '127.0.9.2';
const ORIGINS = '127.0.9.10';
const VICTIM_L4_PORT = 18001;
const VICTIM_HTTPS_PORT = 18443;
const QUOTA = { proxies: 5, certificates: 3, caCertificates: 2 };

function assertError(answer: Answer, status: number, code: string, pointer?: string): ErrorBody['errors'][number] {
  assert.equal(answer.status, status, JSON.stringify(answer.body));
  const errors = (answer.body as ErrorBody).errors;
  assert.ok(Array.isArray(errors) && errors.length > 0, `a JSON:API error document: ${JSON.stringify(answer.body)}`);
  const match = errors.find((error) => error.code === code && (pointer === undefined || error.source?.pointer === pointer));
  assert.ok(match, `expected ${code} at ${pointer ?? '(any)'}, got ${JSON.stringify(errors)}`);
  return match;
}

const l4Proxy = (port: number, originPort: number, frontend: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  data: {
    type: 'l4Proxy',
    attributes: { frontend: { ipv4: FRONTEND, port, ...frontend }, backend: { hosts: [{ address: ORIGINS, port: originPort }] }, ...extra },
  },
});

/** A TCP origin that answers every chunk with its name, and an HTTP origin that does the same. */
async function namedOrigins(name: string): Promise<{ tcp: number; http: number; close(): void }> {
  const tcp = net.createServer((socket) => {
    socket.on('data', () => socket.write(name));
    socket.on('error', () => {});
  });
  const web = http.createServer((_request, response) => response.end(name));
  await Promise.all([
    new Promise<void>((resolve) => tcp.listen(0, ORIGINS, resolve)),
    new Promise<void>((resolve) => web.listen(0, ORIGINS, resolve)),
  ]);
  return {
    tcp: (tcp.address() as net.AddressInfo).port,
    http: (web.address() as net.AddressInfo).port,
    close: () => {
      tcp.close();
      web.closeAllConnections();
      web.close();
    },
  };
}

function httpsGet(port: number, servername: string, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = https.get(
      { host: FRONTEND, port, path: '/', servername, ca, headers: { host: servername }, agent: false },
      (response) => {
        let body = '';
        response.on('data', (chunk: Buffer) => (body += chunk.toString()));
        response.on('end', () => resolve(`${response.statusCode} ${body}`));
      },
    );
    request.on('error', reject);
    request.setTimeout(5_000, () => request.destroy(new Error('no answer within 5 s')));
  });
}

for (const store of ['sqlite', 'postgres'] as StoreKind[])
  describe(`hostile tenants (${store} store)`, () => {
    let tps: Tps;
    let victim: TenantApi;
    let attacker: TenantApi;
    let victimOrigins: Awaited<ReturnType<typeof namedOrigins>>;
    let attackerOrigins: Awaited<ReturnType<typeof namedOrigins>>;
    let root: TestCa;
    const ids = { l4: '', https: '', certificate: '', ca: '' };

    /** Everything the victim can read about its own resources. */
    const victimView = async () => {
      const read = async (path: string) => {
        const answer = await victim.get(path);
        assert.equal(answer.status, 200, JSON.stringify(answer.body));
        return answer.body;
      };
      const ips = await read(`/api/v1/traffic-mgmt/accounts/${victim.tenantId}/ips`);
      const ports = ips.data.find((ip: { attributes: { address: string } }) => ip.attributes.address === FRONTEND).attributes
        .assignedPorts as { port: number }[];
      return {
        configs: await read(CONFIGS),
        certificates: await read(CERTIFICATES),
        caCertificates: await read(CA_CERTIFICATES),
        // The store's hold on the victim's ports (what keeps anyone else off them).
        ports: ports.filter((entry) => entry.port === VICTIM_L4_PORT || entry.port === VICTIM_HTTPS_PORT),
      };
    };

    /** The victim's traffic: every connection to its L4 port and its HTTPS port reaches its own origins. */
    const assertVictimTraffic = async () => {
      for (let i = 0; i < 12; i++) assert.equal(await roundTrip({ host: FRONTEND, port: VICTIM_L4_PORT }, `ping ${i}`), 'victim');
      for (let i = 0; i < 4; i++) assert.equal(await httpsGet(VICTIM_HTTPS_PORT, 'www.victim.example', root.certificatePem), '200 victim');
    };

    const statusOf = async (api: TenantApi, id: string) => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status as string;

    before(async () => {
      tps = await startTps({
        store,
        env: {
          TPS_EDGE: 'true',
          TPS_EDGE_WORKERS: '2',
          TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
          TPS_FRONTEND_IPS: `${FRONTEND},${OTHER_FRONTEND}`,
          TPS_QUOTA_PROXIES: String(QUOTA.proxies),
          TPS_QUOTA_CERTIFICATES: String(QUOTA.certificates),
          TPS_QUOTA_CA_CERTIFICATES: String(QUOTA.caCertificates),
          // Orders are accepted (and counted) only where an ACME service runs.
          TPS_ACME_DIRECTORY_URL: ACME_DIRECTORY_UNREACHABLE,
        },
      });
      victim = await TenantApi.connect(tps, await createTenant(tps));
      attacker = await TenantApi.connect(tps, await createTenant(tps));
      victimOrigins = await namedOrigins('victim');
      attackerOrigins = await namedOrigins('attacker');

      root = await TestCa.create('Victim Root CA');
      const intermediate = await root.intermediate('Victim Intermediate CA');
      const leaf = await intermediate.issue({ commonName: 'www.victim.example', dnsNames: ['www.victim.example'] });
      const certificate = await victim.call('POST', `${CERTIFICATES}/pem`, {
        data: {
          type: 'certificate',
          attributes: { certificate: leaf.certificatePem, intermediateCertificates: intermediate.chainPem, privateKey: leaf.privateKeyPem },
        },
      });
      assert.equal(certificate.status, 201, JSON.stringify(certificate.body));
      ids.certificate = certificate.body.data.id;
      const ca = await victim.call('POST', CA_CERTIFICATES, {
        data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem }] } },
      });
      assert.equal(ca.status, 201, JSON.stringify(ca.body));
      ids.ca = ca.body.data.id;

      const l4 = await victim.call('POST', CONFIGS, l4Proxy(VICTIM_L4_PORT, victimOrigins.tcp));
      assert.equal(l4.status, 201, JSON.stringify(l4.body));
      ids.l4 = l4.body.data.id;
      const httpsProxy = await victim.call('POST', CONFIGS, {
        data: {
          type: 'httpProxy',
          attributes: {
            frontend: {
              ipv4: FRONTEND,
              port: VICTIM_HTTPS_PORT,
              certificateId: ids.certificate,
              clientCertificateVerification: { mode: 'VERIFY_AND_FORWARD', caCertificateIds: [ids.ca] },
            },
            backend: { hosts: [{ address: ORIGINS, port: victimOrigins.http }] },
          },
        },
      });
      assert.equal(httpsProxy.status, 201, JSON.stringify(httpsProxy.body));
      ids.https = httpsProxy.body.data.id;
      await waitFor(
        'the victim ACTIVE',
        async () => (await statusOf(victim, ids.l4)) === 'ACTIVE' && (await statusOf(victim, ids.https)) === 'ACTIVE',
      );
      await assertVictimTraffic();
    });

    after(async () => {
      await tps.stop();
      victimOrigins.close();
      attackerOrigins.close();
    });

    it("answers 404 to every write on the victim's resources and changes nothing of them", async () => {
      const before = await victimView();
      const takeover = l4Proxy(VICTIM_L4_PORT, attackerOrigins.tcp);
      const calls: [string, string, unknown][] = [
        ['DELETE', `${CONFIGS}/${ids.l4}`, undefined],
        ['DELETE', `${CONFIGS}/${ids.https}`, undefined],
        ['PUT', `${CONFIGS}/${ids.l4}`, takeover],
        ['PUT', `${CONFIGS}/${ids.l4}`, { data: { ...takeover.data, id: ids.l4 } }],
        [
          'PATCH',
          `${CONFIGS}/${ids.l4}`,
          { data: { type: 'l4Proxy', attributes: { backend: { hosts: [{ address: ORIGINS, port: attackerOrigins.tcp }] } } } },
        ],
        ['PATCH', `${CONFIGS}/${ids.https}`, { data: { type: 'httpProxy', attributes: { frontend: { certificateId: null } } } }],
        ['DELETE', `${CERTIFICATES}/${ids.certificate}`, undefined],
        ['POST', `${CERTIFICATES}/${ids.certificate}/renew`, undefined],
        ['DELETE', `${CA_CERTIFICATES}/${ids.ca}`, undefined],
        ['PUT', `${CERTIFICATES}/${ids.certificate}`, { data: { type: 'certificate', attributes: {} } }],
        ['PATCH', `${CA_CERTIFICATES}/${ids.ca}`, { data: { type: 'caCertificate', attributes: {} } }],
      ];
      for (const [method, path, body] of calls) {
        const answer = await attacker.call(method, path, body);
        assertError(answer, 404, 'NOT_FOUND');
        assert.ok(!JSON.stringify(answer.body).includes(victim.tenantId), `${method} ${path} names nothing of the victim`);
      }
      assert.deepEqual(await victimView(), before, "the victim's resources read back the same");
      await assertVictimTraffic();
    });

    it("never gets the attacker the victim's ip:port, whatever the sequence of its calls", async () => {
      const before = await victimView();
      const portInUse = (answer: Answer) => assertError(answer, 409, 'PORT_IN_USE', '/data/attributes/frontend/port');

      // The takeover: delete the victim's proxy (404), then create on its ip:port.
      assertError(await attacker.call('DELETE', `${CONFIGS}/${ids.l4}`), 404, 'NOT_FOUND');
      portInUse(await attacker.call('POST', CONFIGS, l4Proxy(VICTIM_L4_PORT, attackerOrigins.tcp)));
      // The same after a PUT and a PATCH of the victim's id.
      assertError(await attacker.call('PUT', `${CONFIGS}/${ids.l4}`, l4Proxy(VICTIM_L4_PORT + 1, attackerOrigins.tcp)), 404, 'NOT_FOUND');
      assertError(
        await attacker.call('PATCH', `${CONFIGS}/${ids.l4}`, {
          data: { type: 'l4Proxy', attributes: { frontend: { port: VICTIM_L4_PORT + 2 } } },
        }),
        404,
        'NOT_FOUND',
      );
      portInUse(await attacker.call('POST', CONFIGS, l4Proxy(VICTIM_L4_PORT, attackerOrigins.tcp)));
      // Both protocols, the HTTP form, and both front-end addresses at once.
      portInUse(await attacker.call('POST', CONFIGS, l4Proxy(VICTIM_L4_PORT, attackerOrigins.tcp, {}, { protocols: ['UDP', 'TCP'] })));
      portInUse(
        await attacker.call('POST', CONFIGS, {
          data: {
            type: 'httpProxy',
            attributes: {
              frontend: { ipv4: FRONTEND, port: VICTIM_HTTPS_PORT },
              backend: { hosts: [{ address: ORIGINS, port: attackerOrigins.http }] },
            },
          },
        }),
      );
      // Another spelling of the address is not another address.
      const mapped = await attacker.call('POST', CONFIGS, {
        data: {
          type: 'l4Proxy',
          attributes: {
            frontend: { ipv6: `::ffff:${FRONTEND}`, port: VICTIM_L4_PORT },
            backend: { hosts: [{ address: ORIGINS, port: attackerOrigins.tcp }] },
          },
        },
      });
      assert.ok(mapped.status === 409 || mapped.status === 422, JSON.stringify(mapped.body));

      // Its own proxy moved onto the victim's port by PUT or PATCH: refused, and it stays where it was.
      const own = await attacker.call('POST', CONFIGS, l4Proxy(VICTIM_L4_PORT + 10, attackerOrigins.tcp));
      assert.equal(own.status, 201, JSON.stringify(own.body));
      const ownId = own.body.data.id as string;
      portInUse(await attacker.call('PUT', `${CONFIGS}/${ownId}`, l4Proxy(VICTIM_L4_PORT, attackerOrigins.tcp)));
      portInUse(
        await attacker.call('PATCH', `${CONFIGS}/${ownId}`, {
          data: { type: 'l4Proxy', attributes: { frontend: { port: VICTIM_L4_PORT } } },
        }),
      );
      portInUse(
        await attacker.call('PATCH', `${CONFIGS}/${ownId}`, {
          data: { type: 'l4Proxy', attributes: { frontend: { port: VICTIM_HTTPS_PORT }, protocols: ['TCP'] } },
        }),
      );
      assert.equal((await attacker.get(`${CONFIGS}/${ownId}`)).body.data.attributes.frontend.port, VICTIM_L4_PORT + 10);

      // Deletes of the victim's ids racing creates on its port: every create still loses.
      const race = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          i % 2 === 0
            ? attacker.call('DELETE', `${CONFIGS}/${ids.l4}`)
            : attacker.call('POST', CONFIGS, l4Proxy(VICTIM_L4_PORT, attackerOrigins.tcp)),
        ),
      );
      for (const [i, answer] of race.entries()) {
        if (i % 2 === 0) assertError(answer, 404, 'NOT_FOUND');
        else portInUse(answer);
      }
      assert.equal((await attacker.call('DELETE', `${CONFIGS}/${ownId}`)).status, 204);
      assert.deepEqual(await victimView(), before);
      await assertVictimTraffic();
    });

    it('names nothing of another tenant when refusing to delete a certificate in use', async () => {
      // The victim's own refusal names its own configuration.
      const own = await victim.call('DELETE', `${CERTIFICATES}/${ids.certificate}`);
      const inUse = assertError(own, 409, 'IN_USE');
      assert.match(inUse.detail, new RegExp(ids.https));
      const ownCa = assertError(await victim.call('DELETE', `${CA_CERTIFICATES}/${ids.ca}`), 409, 'IN_USE');
      assert.match(ownCa.detail, new RegExp(ids.https));
      // The attacker learns nothing: 404 as for an id that never existed, no configuration id, no tenant.
      for (const path of [`${CERTIFICATES}/${ids.certificate}`, `${CA_CERTIFICATES}/${ids.ca}`]) {
        const answer = await attacker.call('DELETE', path);
        assertError(answer, 404, 'NOT_FOUND');
        const text = JSON.stringify(answer.body);
        for (const secret of [ids.https, ids.l4, victim.tenantId]) assert.ok(!text.includes(secret), `${path}: ${text}`);
      }
      await assertVictimTraffic();
    });

    it('holds the quotas, also for concurrent creates at the last slot', async () => {
      const tenant = await TenantApi.connect(tps, await createTenant(tps));
      const quotaError = (answer: Answer, limit: number) => {
        const error = assertError(answer, 409, 'QUOTA_EXCEEDED', '/data');
        assert.match(error.detail, new RegExp(`quota is ${limit}`));
      };

      // Proxies: fill all but the last slot, then race for it.
      for (let i = 0; i < QUOTA.proxies - 1; i++) {
        assert.equal((await tenant.call('POST', CONFIGS, l4Proxy(18100 + i, attackerOrigins.tcp, { ipv4: OTHER_FRONTEND }))).status, 201);
      }
      const proxies = await Promise.all(
        Array.from({ length: 5 }, (_, i) =>
          tenant.call('POST', CONFIGS, l4Proxy(18200 + i, attackerOrigins.tcp, { ipv4: OTHER_FRONTEND })),
        ),
      );
      assert.equal(proxies.filter((answer) => answer.status === 201).length, 1, JSON.stringify(proxies.map((answer) => answer.status)));
      for (const answer of proxies.filter((candidate) => candidate.status !== 201)) quotaError(answer, QUOTA.proxies);
      assert.equal((await tenant.get(CONFIGS)).body.data.length, QUOTA.proxies);
      quotaError(await tenant.call('POST', CONFIGS, l4Proxy(18300, attackerOrigins.tcp, { ipv4: OTHER_FRONTEND })), QUOTA.proxies);

      // Certificates: uploads and service-issued requests count alike.
      const uploads = await Promise.all(
        Array.from({ length: QUOTA.certificates + 3 }, async (_, i) => {
          const leaf = await root.issue({ commonName: `q${i}.example.test`, dnsNames: [`q${i}.example.test`] });
          return tenant.call('POST', `${CERTIFICATES}/pem`, {
            data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
          });
        }),
      );
      assert.equal(
        uploads.filter((answer) => answer.status === 201).length,
        QUOTA.certificates,
        JSON.stringify(uploads.map((answer) => answer.status)),
      );
      for (const answer of uploads.filter((candidate) => candidate.status !== 201)) quotaError(answer, QUOTA.certificates);
      quotaError(
        await tenant.call('POST', `${CERTIFICATES}/lets-encrypt`, {
          data: { type: 'certificate', attributes: { domains: ['more.example.test'] } },
        }),
        QUOTA.certificates,
      );
      assert.equal((await tenant.get(CERTIFICATES)).body.data.length, QUOTA.certificates);

      // CA certificates.
      const cas = await Promise.all(
        Array.from({ length: QUOTA.caCertificates + 3 }, () =>
          tenant.call('POST', CA_CERTIFICATES, {
            data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem }] } },
          }),
        ),
      );
      assert.equal(
        cas.filter((answer) => answer.status === 201).length,
        QUOTA.caCertificates,
        JSON.stringify(cas.map((answer) => answer.status)),
      );
      for (const answer of cas.filter((candidate) => candidate.status !== 201)) quotaError(answer, QUOTA.caCertificates);

      // Another tenant's quota is its own; a delete frees a slot.
      const other = await TenantApi.connect(tps, await createTenant(tps));
      assert.equal(
        (
          await other.call('POST', CA_CERTIFICATES, {
            data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem }] } },
          })
        ).status,
        201,
      );
      const first = (await tenant.get(CA_CERTIFICATES)).body.data[0].id as string;
      assert.equal((await tenant.call('DELETE', `${CA_CERTIFICATES}/${first}`)).status, 204);
      assert.equal(
        (
          await tenant.call('POST', CA_CERTIFICATES, {
            data: { type: 'caCertificate', attributes: { certificates: [{ certificate: root.certificatePem }] } },
          })
        ).status,
        201,
      );

      // Counted for the operators.
      const metrics = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
      assert.match(metrics, /tps_api_quota_exceeded_total\{resource="proxies"\} [1-9]/);
      assert.match(metrics, /tps_api_quota_exceeded_total\{resource="certificates"\} [1-9]/);
      assert.match(metrics, /tps_api_quota_exceeded_total\{resource="CA certificates"\} [1-9]/);
    });

    it('answers malformed documents on every write route with a 4xx JSON:API error', async () => {
      const before = await victimView();
      const bodies = [
        '{"data": null}',
        '{"data": "x"}',
        '{"data": []}',
        '{}',
        '[]',
        '"x"',
        'null',
        '{"data": {"type": null}}',
        '{"data": {"type": "l4Proxy", "attributes": null}}',
        '{"data": {"type": "httpProxy", "attributes": {"frontend": null, "backend": null}}}',
        '{"data":',
      ];
      const routes: [string, string][] = [
        ['POST', CONFIGS],
        ['PUT', `${CONFIGS}/${ids.l4}`],
        ['PATCH', `${CONFIGS}/${ids.l4}`],
        ['POST', `${CERTIFICATES}/pem`],
        ['GET', `${CERTIFICATES}/pem`],
        ['POST', `${CERTIFICATES}/lets-encrypt`],
        ['POST', CA_CERTIFICATES],
      ];
      for (const api of [victim, attacker]) {
        for (const [method, path] of routes) {
          for (const rawBody of bodies) {
            const answer = await api.call(method, path, undefined, { rawBody, contentType: 'application/vnd.api+json' });
            assert.ok(
              answer.status >= 400 && answer.status < 500,
              `${method} ${path} ${rawBody}: ${answer.status} ${JSON.stringify(answer.body)}`,
            );
            assert.ok(Array.isArray((answer.body as ErrorBody).errors), `${method} ${path} ${rawBody}: a JSON:API error`);
          }
        }
      }
      assert.deepEqual(await victimView(), before);
    });
  });
