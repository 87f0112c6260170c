/**
 * Service-issued certificates against a real ACME CA: Pebble (Debian's `pebble`), which really
 * validates the challenges (PEBBLE_VA_ALWAYS_VALID=0) at the address its DNS gives for the test
 * domains: 127.0.0.61, standing for the tenant's proxy.
 *
 * `tps serve` runs the ACME service (TPS_ACME_DIRECTORY_URL = Pebble). The HTTP proxy is not wired
 * to the store here, so two minimal stand-ins answer on 127.0.0.61 from the same store the way a
 * proxy of the test's tenant does: an HTTP responder for HTTP-01 (the proxy's acme-challenge phase, with
 * `AcmeChallengeResponder.challengeResponse`), and a TLS listener that reads the ClientHello and
 * either presents the TLS-ALPN-01 certificate (`createAcmeTlsAlpnServer`) or serves the
 * certificate record as it is in the store at each handshake (what the edge does after a reload).
 * Pebble validates on its configured httpPort/tlsPort of that address.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import https from 'node:https';
import acme from 'acme-client';
import { startPebble, type Pebble } from '../support/pebble.ts';
import { startTps, createTenant, openStoreOf, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import type { Store } from '../../src/store/index.ts';
import { SecretBox, acmeAccountKeyBinding, certificateKeyBinding } from '../../src/certs/secret-box.ts';
import { AcmeChallengeResponder } from '../../src/certs/acme-challenges.ts';
import { AcmeService } from '../../src/certs/acme.ts';
import { createAcmeTlsAlpnServer, isAcmeTlsAlpn } from '../../src/edge/http/tls-alpn-acme.ts';
import { readClientHello } from '../../src/net/client-hello.ts';
import { crlsFor, verifyCrl } from '../../src/certs/crl.ts';
import { TestCa } from '../support/pki.ts';
import { freePort } from '../support/ports.ts';

const PROXY_IP = '127.0.0.61';
const DEAD_IP = '127.0.0.69';
const CERTIFICATES = '/api/v2/traffic-mgmt/certificates';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';

describe('service-issued certificates from an ACME CA (Pebble)', () => {
  let pebble: Pebble;
  let tps: Tps;
  let api: TenantApi;
  let tenantId: string;
  let store: Store;
  let secrets: SecretBox;
  let pebbleRoot: string;
  let tmp: string;
  let httpResponder: http.Server;
  let tlsListener: net.Server;
  let acmeTlsServer: tls.Server;
  let siteTlsServer: tls.Server;
  /** What the stand-in proxy saw: HTTP-01 requests, acme-tls/1 and ordinary TLS connections. */
  const seen = { http01: [] as string[], tlsAlpn: [] as string[], tls: [] as string[] };
  /** The certificate record the stand-in proxy serves on its TLS port (as a proxy with certificateId would). */
  let servedCertificateId: string | undefined;

  before(async () => {
    const [httpPort, tlsPort] = [await freePort(PROXY_IP), await freePort(PROXY_IP)];
    pebble = await startPebble({ ip: '127.0.0.60', targetIp: PROXY_IP, httpPort, tlsPort });
    await pebble.addA('unreachable.tps.test', DEAD_IP);
    pebbleRoot = await pebble.rootPem();
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-acme-e2e-'));
    const caBundle = path.join(tmp, 'pebble-https-ca.pem');
    fs.writeFileSync(caBundle, pebble.caBundlePem);

    tps = await startTps({
      env: {
        // Origins (and CRL servers) run on loopback, which the origin policy refuses unless allowed.
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_FRONTEND_IPS: PROXY_IP,
        TPS_ACME_DIRECTORY_URL: pebble.directoryUrl,
        TPS_ACME_EMAIL: 'ops@tps.test',
        TPS_ACME_CA_BUNDLE: caBundle,
      },
    });
    const credentials = await createTenant(tps);
    tenantId = credentials.tenantId;
    api = await TenantApi.connect(tps, credentials);
    store = await openStoreOf(tps);
    secrets = SecretBox.fromSettings({ masterKey: undefined, dataDir: tps.env.TPS_DATA_DIR! });
    const challenges = new AcmeChallengeResponder(store.acmeChallenges);

    // HTTP-01: what the proxy's acme-challenge phase answers on port 80.
    httpResponder = http.createServer(async (request, response) => {
      const token = /^\/\.well-known\/acme-challenge\/([A-Za-z0-9_-]+)$/.exec(request.url ?? '')?.[1];
      const host = (request.headers.host ?? '').replace(/:\d+$/, '');
      seen.http01.push(host);
      const keyAuthorization = token ? await challenges.challengeResponse(token, host, tenantId) : undefined;
      response.writeHead(keyAuthorization ? 200 : 404, { 'content-type': 'text/plain' });
      response.end(keyAuthorization ?? 'not found\n');
    });
    await new Promise<void>((resolve) => httpResponder.listen(httpPort, PROXY_IP, resolve));

    // The TLS port: validation connections get the challenge certificate, others the stored certificate.
    acmeTlsServer = createAcmeTlsAlpnServer({
      alpnChallengeCertificate: (servername) => challenges.alpnChallengeCertificate(servername, tenantId),
    });
    siteTlsServer = tls.createServer({
      SNICallback: (servername, callback) => {
        void (async () => {
          const record = servedCertificateId ? await store.certificates.getAny(servedCertificateId) : undefined;
          if (!record?.certificatePem || !record.sealedPrivateKey)
            return callback(new Error(`nothing to serve for ${servername}`), undefined);
          callback(
            null,
            tls.createSecureContext({
              cert: record.certificatePem + (record.chainPem ?? ''),
              key: secrets.open(record.sealedPrivateKey, certificateKeyBinding(record)),
            }),
          );
        })().catch((error: Error) => callback(error, undefined));
      },
    });
    siteTlsServer.on('secureConnection', (socket) => socket.end('hello over TLS\n'));
    tlsListener = net.createServer(async (socket) => {
      socket.on('error', () => {});
      const hello = await readClientHello(socket);
      if (hello && isAcmeTlsAlpn(hello)) {
        seen.tlsAlpn.push(hello.servername ?? '');
        acmeTlsServer.emit('connection', socket);
      } else {
        seen.tls.push(hello?.servername ?? '');
        siteTlsServer.emit('connection', socket);
      }
    });
    await new Promise<void>((resolve) => tlsListener.listen(tlsPort, PROXY_IP, resolve));
  });

  after(async () => {
    httpResponder?.close();
    tlsListener?.close();
    acmeTlsServer?.close();
    siteTlsServer?.close();
    await store?.close();
    await tps?.stop();
    await pebble?.stop();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  /** Polls the certificate until `done` holds (bounded: 90 s). */
  async function waitForCertificate(id: string, done: (attributes: any) => boolean): Promise<any> {
    const deadline = Date.now() + 90_000;
    for (;;) {
      const answer = await api.get(`${CERTIFICATES}/${id}`);
      assert.equal(answer.status, 200);
      if (done(answer.body.data.attributes)) return answer.body.data.attributes;
      if (Date.now() > deadline) {
        assert.fail(
          `certificate ${id} did not get there within 90 s: ${JSON.stringify(answer.body.data.attributes)}\n${tps.output().slice(-4000)}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /** A TLS client trusting only Pebble's root, as a browser would trust Let's Encrypt's. */
  function handshake(servername: string): Promise<{ authorized: boolean; fingerprint: string; body: string }> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({ host: PROXY_IP, port: pebble.tlsPort, servername, ca: pebbleRoot, ALPNProtocols: ['http/1.1'] }, () => {
        const fingerprint = socket.getPeerX509Certificate()!.fingerprint256;
        let body = '';
        socket.on('data', (chunk: Buffer) => (body += chunk.toString()));
        socket.on('end', () => resolve({ authorized: socket.authorized, fingerprint, body }));
      });
      socket.on('error', reject);
    });
  }

  /**
   * Deactivates every valid authorization of the service's ACME account (the one it stored), so
   * that its next order must validate each name again; returns their names. PEBBLE_AUTHZREUSE=0
   * does not promise that by itself: Pebble's new-order handler (wfe.go, v2.4.0 and still upstream)
   * makes a fresh authorization only when `rand.Intn(100) > authzReusePercent`, so at 0 it reuses a
   * valid one for 1 name in 100, and the service rightly skips an authorization already valid.
   */
  async function deactivateValidAuthorizations(): Promise<string[]> {
    const account = (await store.acmeAccounts.get(pebble.directoryUrl, tenantId))!;
    acme.axios.defaults.httpsAgent = new https.Agent({ ca: pebble.caBundlePem });
    const client = new acme.Client({
      directoryUrl: pebble.directoryUrl,
      accountKey: secrets.open(account.sealedPrivateKey, acmeAccountKeyBinding(pebble.directoryUrl, tenantId)),
      accountUrl: account.accountUrl,
    });
    // POST-as-GET of the account's orders list (RFC 8555 section 7.1.2.1), which acme-client has no method for.
    const { api: acmeApi } = client as unknown as {
      api: {
        apiRequest(
          url: string,
          payload: null,
          validStatusCodes: number[],
        ): Promise<{ data: { orders: string[] }; headers: { link?: string } }>;
      };
    };
    const deactivated: string[] = [];
    let page: string | undefined = (await client.updateAccount()).orders;
    while (page) {
      const listed = await acmeApi.apiRequest(page, null, [200]);
      for (const url of listed.data.orders) {
        const order = await client.getOrder({ url } as acme.Order);
        for (const authorization of await client.getAuthorizations(order)) {
          if (authorization.status !== 'valid') continue;
          await client.deactivateAuthorization(authorization);
          deactivated.push(authorization.identifier.value);
        }
      }
      page = /<([^>]+)>;\s*rel="next"/.exec(listed.headers.link ?? '')?.[1];
    }
    return deactivated;
  }

  let configId: string;
  let certificateId: string;
  const backend = { hosts: [{ address: '127.0.0.12', port: 8080 }] };

  it('issues a certificate through HTTP-01 answered on port 80: PENDING, then ISSUED with the chain', async () => {
    const created = await api.call('POST', CONFIGS, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: PROXY_IP, port: 80 }, backend } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    configId = created.body.data.id;

    const requested = await api.call('POST', `${CERTIFICATES}/lets-encrypt`, {
      data: { type: 'certificate', attributes: { domains: ['www.tps.test', 'shop.tps.test'] } },
    });
    assert.equal(requested.status, 201, JSON.stringify(requested.body));
    assert.equal(requested.body.data.attributes.status, 'PENDING');
    certificateId = requested.body.data.id;

    const issued = await waitForCertificate(certificateId, (attributes) => attributes.status !== 'PENDING');
    assert.equal(issued.status, 'ISSUED', issued.statusDetail);
    assert.equal(issued.statusDetail, null);
    assert.equal(issued.source, 'ACME');
    assert.deepEqual([...issued.subjectAltNames].sort(), ['shop.tps.test', 'www.tps.test']);
    assert.match(issued.issuer, /Pebble/);
    assert.match(issued.intermediateCertificates, /BEGIN CERTIFICATE/, 'the chain is stored');
    assert.ok(!JSON.stringify(issued).includes('PRIVATE KEY'), 'the private key is never shown');
    assert.ok(
      seen.http01.includes('www.tps.test') && seen.http01.includes('shop.tps.test'),
      `Pebble fetched both HTTP-01 answers: ${seen.http01}`,
    );
    assert.deepEqual(seen.tlsAlpn, [], 'no TLS-ALPN-01 while port 80 answers');
    assert.deepEqual(await store.acmeChallenges.live(new Date().toISOString()), [], 'the challenges are cleaned up');
  });

  it('serves the issued chain: PUT with the certificate on the TLS port, and a client trusting the CA completes the handshake', async () => {
    const replaced = await api.call('PUT', `${CONFIGS}/${configId}`, {
      data: { type: 'httpProxy', id: configId, attributes: { frontend: { ipv4: PROXY_IP, port: 443, certificateId }, backend } },
    });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    servedCertificateId = certificateId;
    const record = (await api.get(`${CERTIFICATES}/${certificateId}`)).body.data.attributes;
    const answer = await handshake('www.tps.test');
    assert.equal(answer.authorized, true, "the chain verifies against Pebble's root");
    assert.equal(answer.fingerprint, record.fingerprint);
    assert.equal(answer.body, 'hello over TLS\n');
  });

  it('renews through TLS-ALPN-01 once no proxy answers port 80, in the same record, served without a restart', async () => {
    const before = (await api.get(`${CERTIFICATES}/${certificateId}`)).body.data.attributes;
    const revision = await store.revision();
    const http01Before = seen.http01.length;
    // Nothing for Pebble to reuse: the renewal validates both names again (see the helper).
    assert.deepEqual(
      (await deactivateValidAuthorizations()).sort(),
      ['shop.tps.test', 'www.tps.test'],
      'the first issuance left one valid authorization per name',
    );
    const tlsAlpnBefore = seen.tlsAlpn.length;

    const renew = await api.call('POST', `${CERTIFICATES}/${certificateId}/renew`);
    assert.equal(renew.status, 202, JSON.stringify(renew.body));
    const renewed = await waitForCertificate(
      certificateId,
      (attributes) => attributes.fingerprint !== before.fingerprint || attributes.statusDetail !== null,
    );
    assert.equal(renewed.statusDetail, null, 'the renewal succeeded');
    assert.equal(renewed.status, 'ISSUED');
    assert.notEqual(renewed.fingerprint, before.fingerprint, 'new material in the same record');
    assert.deepEqual([...renewed.subjectAltNames].sort(), ['shop.tps.test', 'www.tps.test']);
    const validated = seen.tlsAlpn.slice(tlsAlpnBefore);
    assert.ok(
      validated.includes('www.tps.test') && validated.includes('shop.tps.test'),
      `Pebble validated both names with acme-tls/1: ${validated}`,
    );
    assert.equal(seen.http01.length, http01Before, 'no HTTP-01 this time');
    assert.ok((await store.revision()) > revision, 'the store revision moved, so the edge reloads the certificate');
    const stored = await store.certificates.getAny(certificateId);
    assert.ok(stored?.acme?.renewAfter && stored.acme.renewAfter > new Date().toISOString(), 'the next renewal is scheduled');

    const answer = await handshake('shop.tps.test');
    assert.equal(answer.authorized, true);
    assert.equal(answer.fingerprint, renewed.fingerprint, 'the listener serves the renewed certificate');
  });

  it("reports a challenge the CA could not validate as FAILED, with the CA's reason", async () => {
    const requested = await api.call('POST', `${CERTIFICATES}/lets-encrypt`, {
      data: { type: 'certificate', attributes: { domains: ['unreachable.tps.test'] } },
    });
    assert.equal(requested.status, 201);
    const failed = await waitForCertificate(requested.body.data.id, (attributes) => attributes.status !== 'PENDING');
    assert.equal(failed.status, 'FAILED');
    // Pebble's own words: it could not connect to the address its DNS gave for the name.
    assert.match(
      failed.statusDetail,
      /^http-01 validation of unreachable\.tps\.test failed: urn:ietf:params:acme:error:connection: .*127\.0\.0\.69.*connection refused/i,
    );
    assert.equal(failed.subject, undefined);
  });

  it('registers a new ACME account when the CA reports the stored one deactivated', async () => {
    const account = (await store.acmeAccounts.get(pebble.directoryUrl, tenantId))!;
    assert.ok(account, "the tenant's account at the directory, stored");
    assert.equal(account.email, 'ops@tps.test');
    assert.ok(!account.sealedPrivateKey.includes('PRIVATE KEY'), 'the account key is sealed');
    // The CA deactivates it (here: its owner does, through the CA).
    acme.axios.defaults.httpsAgent = new https.Agent({ ca: pebble.caBundlePem });
    const client = new acme.Client({
      directoryUrl: pebble.directoryUrl,
      accountKey: secrets.open(account.sealedPrivateKey, acmeAccountKeyBinding(pebble.directoryUrl, tenantId)),
      accountUrl: account.accountUrl,
    });
    const deactivated = await client.updateAccount({ status: 'deactivated' });
    assert.equal(deactivated.status, 'deactivated');

    const requested = await api.call('POST', `${CERTIFICATES}/lets-encrypt`, {
      data: { type: 'certificate', attributes: { domains: ['api.tps.test'] } },
    });
    const issued = await waitForCertificate(requested.body.data.id, (attributes) => attributes.status !== 'PENDING');
    assert.equal(issued.status, 'ISSUED', issued.statusDetail);
    const replacement = (await store.acmeAccounts.get(pebble.directoryUrl, tenantId))!;
    assert.notEqual(replacement.accountUrl, account.accountUrl, 'a new account replaced the dead one');
    assert.match(tps.output(), /the CA refused the account; registering a new one/);
  });

  it('renews by itself once the certificate is due (30 days old), with no one asking', async () => {
    const before = (await store.certificates.getAny(certificateId))!;
    const thirtyDays = 30 * 24 * 3600_000;
    assert.ok(
      Math.abs(Date.parse(before.acme!.renewAfter!) - (Date.parse(before.notBefore!) + thirtyDays)) < 1000,
      'renewal is scheduled 30 days after notBefore',
    );
    // Thirty days pass: the renewal time is now in the past.
    await store.db.run('UPDATE certificates SET renew_after = ? WHERE id = ?', [new Date(Date.now() - 1000).toISOString(), certificateId]);
    // A second ACME service on the same store (as a second node would run): whichever node takes
    // the lease renews it; this one scans at once.
    const node = new AcmeService({
      store,
      secrets,
      directoryUrl: pebble.directoryUrl,
      caBundlePem: pebble.caBundlePem,
      nodeId: 'second-node',
      pollMinMs: 500,
    });
    node.start();
    try {
      const renewed = await waitForCertificate(certificateId, (attributes) => attributes.fingerprint !== before.fingerprint);
      assert.equal(renewed.status, 'ISSUED');
      assert.equal(renewed.statusDetail, null);
      const after = (await store.certificates.getAny(certificateId))!;
      assert.ok(Date.parse(after.acme!.renewAfter!) > Date.now() + thirtyDays - 3600_000, 'the next renewal is 30 days away again');
      const answer = await handshake('www.tps.test');
      assert.equal(answer.authorized, true);
      assert.equal(answer.fingerprint, renewed.fingerprint);
    } finally {
      await node.stop();
    }
  });
});

describe('CA certificates: the CRL of an upload is fetched and shown in the resource', () => {
  let tps: Tps;
  let api: TenantApi;
  let crlServer: http.Server;
  let crlBody = '';

  before(async () => {
    crlServer = http.createServer((_request, response) => response.end(crlBody));
    await new Promise<void>((resolve) => crlServer.listen(0, '127.0.0.1', resolve));
    // No ACME service in this one ("off"): nothing leaves the machine.
    // The CRL server runs on loopback, which the origin policy refuses unless allowed.
    tps = await startTps({ env: { TPS_ACME_DIRECTORY_URL: 'off', TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' } });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(async () => {
    crlServer?.close();
    await tps?.stop();
  });

  it('fetches the CRL soon after the upload and reports it under certificates[].crl', async () => {
    const ca = await TestCa.create('Uploaded Client CA');
    const revoked = await ca.issue({ commonName: 'revoked client', client: true });
    ca.revoke(revoked.serialNumber);
    crlBody = await ca.crlPem();
    const crlUrl = `http://127.0.0.1:${(crlServer.address() as net.AddressInfo).port}/client-ca.crl`;

    const uploaded = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: { type: 'caCertificate', attributes: { certificates: [{ certificate: ca.certificatePem, crlUrl }] } },
    });
    assert.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
    const id = uploaded.body.data.id as string;

    const deadline = Date.now() + 20_000;
    let entry: any;
    for (;;) {
      entry = (await api.get(`/api/v2/traffic-mgmt/ca-certificates/${id}`)).body.data.attributes.certificates[0];
      if (entry.crl?.fetchedAt || Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.ok(entry.crl?.fetchedAt, `the CRL was fetched: ${JSON.stringify(entry)}`);
    assert.equal(entry.crl.error, null);
    assert.equal(entry.crl.revokedCount, 1);

    const store = await openStoreOf(tps);
    try {
      const [pem] = await crlsFor(store, [id]);
      assert.ok((await verifyCrl(pem!, ca.certificatePem)).revokedSerials.includes(revoked.serialNumber.toLowerCase()));
    } finally {
      await store.close();
    }
  });
});
