/**
 * The spec's procedure "HTTP proxy with a service-issued certificate", end to end through the real
 * edge: a proxy on port 80 answers the CA's HTTP-01 challenge, the certificate is issued by an ACME
 * CA (Pebble, which really validates), the proxy is PUT on port 443 with it, and HTTPS is served.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { startPebble, type Pebble } from '../support/pebble.ts';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { waitFor } from '../support/wait.ts';

const FRONTEND = '127.0.0.63';
const ORIGIN = '127.0.0.64';
const DOMAIN = 'shop.procedure.tps.test';
const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';

describe('HTTP proxy with a service-issued certificate, through the edge', () => {
  let pebble: Pebble;
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let tmp: string;

  before(async () => {
    // Pebble validates HTTP-01 on port 80 of the address its DNS gives: the proxy's front-end IP.
    pebble = await startPebble({ ip: '127.0.0.62', targetIp: FRONTEND, httpPort: 80, tlsPort: 443 });
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-acme-procedure-'));
    fs.writeFileSync(path.join(tmp, 'pebble-https-ca.pem'), pebble.caBundlePem);
    origin = http.createServer((request, response) => response.end(`origin: ${request.method} ${request.url}`));
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ACME_DIRECTORY_URL: pebble.directoryUrl,
        TPS_ACME_EMAIL: 'ops@tps.test',
        TPS_ACME_CA_BUNDLE: path.join(tmp, 'pebble-https-ca.pem'),
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(async () => {
    await tps?.stop();
    await pebble?.stop();
    origin?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('creates the proxy on port 80, gets the certificate issued, PUTs port 443 and serves HTTPS', async () => {
    const backend = { hosts: [{ address: ORIGIN, port: (origin.address() as { port: number }).port }] };
    const created = await api.call('POST', CONFIGS, { data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONTEND, port: 80 }, backend } } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('the proxy on port 80', async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined));

    const requested = await api.call('POST', '/api/v2/traffic-mgmt/certificates/lets-encrypt', {
      data: { type: 'certificate', attributes: { domains: [DOMAIN] } },
    });
    assert.equal(requested.status, 201);
    const certificateId = requested.body.data.id as string;
    const issued = await waitFor('ISSUED', async () => {
      const { attributes } = (await api.get(`/api/v2/traffic-mgmt/certificates/${certificateId}`)).body.data;
      if (attributes.status === 'FAILED') throw new Error(`issuance failed: ${attributes.statusDetail}`);
      return attributes.status === 'ISSUED' ? attributes : undefined;
    }, { timeoutMs: 60_000 });
    assert.deepEqual(issued.subjectAltNames, [DOMAIN]);

    const replaced = await api.call('PUT', `${CONFIGS}/${id}`, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONTEND, port: 443, certificateId }, backend } },
    });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    const root = await pebble.rootPem();
    const body = await waitFor('HTTPS on port 443', () =>
      new Promise<string | undefined>((resolve) => {
        const request = https.get(`https://${FRONTEND}:443/hello`, { agent: false, ca: root, servername: DOMAIN }, (response) => {
          let text = '';
          response.on('data', (chunk) => (text += chunk));
          response.on('end', () => resolve(response.statusCode === 200 ? text : undefined));
        });
        request.on('error', () => resolve(undefined));
      }),
    );
    assert.equal(body, 'origin: GET /hello', 'a client trusting the CA completes the handshake and reaches the origin');

    // Renewal: no proxy answers port 80 any more, so the CA validates TLS-ALPN-01 on the proxy's port 443.
    const servedFingerprint = () =>
      new Promise<string | undefined>((resolve) => {
        const request = https.get(`https://${FRONTEND}:443/`, { agent: false, ca: root, servername: DOMAIN }, (response) => {
          resolve((response.socket as import('node:tls').TLSSocket).getPeerCertificate().fingerprint256);
          response.resume();
        });
        request.on('error', () => resolve(undefined));
      });
    const before = await servedFingerprint();
    assert.equal(before, issued.fingerprint);
    const renewal = await api.call('POST', `/api/v2/traffic-mgmt/certificates/${certificateId}/renew`);
    assert.equal(renewal.status, 202, JSON.stringify(renewal.body));
    const renewed = await waitFor('the renewed certificate in the record', async () => {
      const { attributes } = (await api.get(`/api/v2/traffic-mgmt/certificates/${certificateId}`)).body.data;
      if (attributes.statusDetail && /renewal failed/.test(attributes.statusDetail)) throw new Error(attributes.statusDetail);
      return attributes.fingerprint !== issued.fingerprint && attributes.status === 'ISSUED' ? attributes : undefined;
    }, { timeoutMs: 60_000 });
    await waitFor('the renewed certificate served without a restart', async () => ((await servedFingerprint()) === renewed.fingerprint ? true : undefined));
  });
});
