/**
 * The spec's procedure "HTTP proxy with a service-issued certificate", end to end through the real
 * edge: a proxy on port 80 answers the CA's HTTP-01 challenge, the certificate is issued by an ACME
 * CA (Pebble, which really validates), the proxy is PUT on port 443 with it, and HTTPS is served.
 *
 * Also followed literally: the PUT with the certificate id and port 443 comes at once, while the
 * certificate is PENDING. The proxy keeps serving port 80 (and answering the challenge there) until
 * the certificate is ISSUED, then serves HTTPS on 443; a FAILED certificate leaves it on port 80
 * with the CA's reason in its statusDetail; and a restart of the service while PENDING changes
 * none of that (what the edge serves meanwhile is in the store).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startPebble, type Pebble } from '../support/pebble.ts';
import { startTps, createTenant, type Credentials, type Tps } from '../support/tps.ts';
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
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
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
    const created = await api.call('POST', CONFIGS, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONTEND, port: 80 }, backend } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('the proxy on port 80', async () =>
      (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined,
    );

    const requested = await api.call('POST', '/api/v2/traffic-mgmt/certificates/lets-encrypt', {
      data: { type: 'certificate', attributes: { domains: [DOMAIN] } },
    });
    assert.equal(requested.status, 201);
    const certificateId = requested.body.data.id as string;
    const issued = await waitFor(
      'ISSUED',
      async () => {
        const { attributes } = (await api.get(`/api/v2/traffic-mgmt/certificates/${certificateId}`)).body.data;
        if (attributes.status === 'FAILED') throw new Error(`issuance failed: ${attributes.statusDetail}`);
        return attributes.status === 'ISSUED' ? attributes : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.deepEqual(issued.subjectAltNames, [DOMAIN]);

    const replaced = await api.call('PUT', `${CONFIGS}/${id}`, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONTEND, port: 443, certificateId }, backend } },
    });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    const root = await pebble.rootPem();
    const body = await waitFor(
      'HTTPS on port 443',
      () =>
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
    const renewed = await waitFor(
      'the renewed certificate in the record',
      async () => {
        const { attributes } = (await api.get(`/api/v2/traffic-mgmt/certificates/${certificateId}`)).body.data;
        if (attributes.statusDetail && /renewal failed/.test(attributes.statusDetail)) throw new Error(attributes.statusDetail);
        return attributes.fingerprint !== issued.fingerprint && attributes.status === 'ISSUED' ? attributes : undefined;
      },
      { timeoutMs: 60_000 },
    );
    await waitFor('the renewed certificate served without a restart', async () =>
      (await servedFingerprint()) === renewed.fingerprint ? true : undefined,
    );
  });
});

// ---------------------------------------------------------------------------------------------
// The PUT at once, with the certificate still PENDING.

const PEBBLE_IP = '127.0.0.141';
/** Front-end IPs: the immediate PUT, the FAILED certificate, the restart. */
const FRONT_PUT = '127.0.0.142';
const FRONT_FAILED = '127.0.0.144';
const FRONT_RESTART = '127.0.0.145';
const LITERAL_ORIGIN = '127.0.0.143';
/** Nothing listens here: HTTP-01 for a name resolving to it fails at the CA. */
const NOWHERE = '127.0.0.149';
const CERTIFICATES = '/api/v2/traffic-mgmt/certificates';

/** GET over plain HTTP: the status and body, or undefined when nothing answers. */
function plainGet(ip: string, port: number, path: string): Promise<{ status: number; body: string } | undefined> {
  return new Promise((resolve) => {
    const request = http.get({ host: ip, port, path, agent: false, timeout: 5000 }, (response) => {
      let body = '';
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(undefined));
  });
}

/** GET over HTTPS trusting only `ca` for `servername`: the body of a 200, else undefined. */
function httpsGet(ip: string, servername: string, ca: string, path: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const request = https.get({ host: ip, port: 443, path, agent: false, ca, servername, timeout: 5000 }, (response) => {
      let text = '';
      response.on('data', (chunk) => (text += chunk));
      response.on('end', () => resolve(response.statusCode === 200 ? text : undefined));
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(undefined));
  });
}

describe('the service-issued procedure followed literally: PUT on 443 while the certificate is PENDING', () => {
  let pebble: Pebble;
  let origin: http.Server;
  let tmp: string;
  let caBundle: string;
  let backend: { hosts: { address: string; port: number }[] };
  const running: Tps[] = [];

  const env = (extra: Record<string, string> = {}) => ({
    TPS_EDGE: 'true',
    TPS_EDGE_WORKERS: '2',
    TPS_FRONTEND_IPS: `${FRONT_PUT},${FRONT_FAILED},${FRONT_RESTART}`,
    TPS_ACME_DIRECTORY_URL: pebble.directoryUrl,
    TPS_ACME_EMAIL: 'ops@tps.test',
    TPS_ACME_CA_BUNDLE: caBundle,
    TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
    ...extra,
  });
  const start = async (extra: Record<string, string> = {}) => {
    const tps = await startTps({ env: env(extra) });
    running.push(tps);
    return tps;
  };

  before(async () => {
    pebble = await startPebble({ ip: PEBBLE_IP, targetIp: FRONT_PUT, httpPort: 80, tlsPort: 443 });
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-acme-literal-'));
    caBundle = path.join(tmp, 'pebble-https-ca.pem');
    fs.writeFileSync(caBundle, pebble.caBundlePem);
    origin = http.createServer((request, response) => response.end(`origin: ${request.method} ${request.url}`));
    await new Promise<void>((resolve) => origin.listen(0, LITERAL_ORIGIN, resolve));
    backend = { hosts: [{ address: LITERAL_ORIGIN, port: (origin.address() as { port: number }).port }] };
  });
  after(async () => {
    for (const tps of running) await tps.stop();
    await pebble?.stop();
    origin?.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  /** Creates the proxy on port 80, waits until it serves, orders the certificate and PUTs 443 with it at once. */
  async function createOrderAndPut(api: TenantApi, ip: string, domain: string) {
    const created = await api.call('POST', CONFIGS, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: ip, port: 80 }, backend } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('the proxy on port 80', async () =>
      (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined,
    );
    const requested = await api.call('POST', `${CERTIFICATES}/lets-encrypt`, {
      data: { type: 'certificate', attributes: { domains: [domain] } },
    });
    assert.equal(requested.status, 201, JSON.stringify(requested.body));
    const certificateId = requested.body.data.id as string;
    const replaced = await api.call('PUT', `${CONFIGS}/${id}`, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: ip, port: 443, certificateId }, backend } },
    });
    assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
    assert.deepEqual(replaced.body.data.attributes.frontend, { ipv4: ip, port: 443, certificateId }, 'the configuration is what was PUT');
    return { id, certificateId };
  }

  async function certificateSettled(api: TenantApi, certificateId: string) {
    return waitFor(
      'the certificate ISSUED or FAILED',
      async () => {
        const { attributes } = (await api.get(`${CERTIFICATES}/${certificateId}`)).body.data;
        return attributes.status === 'PENDING' ? undefined : attributes;
      },
      { timeoutMs: 90_000 },
    );
  }

  it('keeps port 80 answering the challenge, then serves HTTPS on 443 once the certificate is ISSUED', async () => {
    const tps = await start();
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const domain = 'literal.procedure.tps.test';
    const { id, certificateId } = await createOrderAndPut(api, FRONT_PUT, domain);

    // Only port 80 of FRONT_PUT can have answered the CA (443 serves nothing before issuance).
    const issued = await certificateSettled(api, certificateId);
    assert.equal(issued.status, 'ISSUED', `${issued.statusDetail}\n${tps.output().slice(-3000)}`);
    const root = await pebble.rootPem();
    const body = await waitFor('HTTPS on port 443', () => httpsGet(FRONT_PUT, domain, root, '/hello'), { timeoutMs: 60_000 });
    assert.equal(body, 'origin: GET /hello');
    await waitFor('port 80 given up', async () => ((await plainGet(FRONT_PUT, 80, '/')) === undefined ? true : undefined));
    const config = await waitFor('ACTIVE', async () => {
      const { attributes } = (await api.get(`${CONFIGS}/${id}`)).body.data;
      return attributes.status === 'ACTIVE' ? attributes : undefined;
    });
    assert.equal(config.statusDetail, null);
    // Port 80 is free again for any proxy.
    const again = await api.call('POST', CONFIGS, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONT_PUT, port: 80 }, backend } },
    });
    assert.equal(again.status, 201, JSON.stringify(again.body));
  });

  it("leaves the proxy serving port 80 when the certificate FAILED, with the CA's reason in statusDetail", async () => {
    const tps = running[0]!;
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const domain = 'failing.procedure.tps.test';
    await pebble.addA(domain, NOWHERE);
    const { id, certificateId } = await createOrderAndPut(api, FRONT_FAILED, domain);

    const failed = await certificateSettled(api, certificateId);
    assert.equal(failed.status, 'FAILED');
    const config = await waitFor('the proxy status saying why', async () => {
      const { attributes } = (await api.get(`${CONFIGS}/${id}`)).body.data;
      return attributes.status === 'ERROR' ? attributes : undefined;
    });
    assert.match(
      config.statusDetail,
      new RegExp(`certificate ${certificateId} is FAILED: http-01 validation of failing\\.procedure\\.tps\\.test failed: .*connection`),
    );
    assert.match(config.statusDetail, /the previous configuration is still served/);
    assert.deepEqual(config.frontend, { ipv4: FRONT_FAILED, port: 443, certificateId }, 'the configuration stays what was PUT');
    assert.deepEqual(await plainGet(FRONT_FAILED, 80, '/still'), { status: 200, body: 'origin: GET /still' }, 'port 80 serves as before');
    assert.equal(await plainGet(FRONT_FAILED, 443, '/'), undefined, 'nothing on 443');

    // Back to plain HTTP on port 80: the waiting ends, the proxy is ACTIVE.
    const back = await api.call('PUT', `${CONFIGS}/${id}`, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONT_FAILED, port: 80 }, backend } },
    });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    await waitFor('ACTIVE again', async () =>
      (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined,
    );
  });

  it('survives a restart of the service while the certificate is PENDING', async () => {
    await running[0]!.stop();
    running.length = 0;
    // The first run's CA never answers (its attempt hangs, holding the order): the order stays
    // PENDING, whatever the timing, and the stop gives it up. The second run, on the same store,
    // orders it. (With TPS_ACME_DIRECTORY_URL=off the order would be refused.)
    const silent = net.createServer((socket) => socket.on('error', () => {}));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const silentDirectory = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}/directory`;
    const dataDir = fs.mkdtempSync(path.join(tmp, 'data-'));
    const first = await start({ TPS_DATA_DIR: dataDir, TPS_ACME_DIRECTORY_URL: silentDirectory });
    const credentials: Credentials = await createTenant(first);
    let api = await TenantApi.connect(first, credentials);
    const domain = 'restart.procedure.tps.test';
    await pebble.addA(domain, FRONT_RESTART);
    const { id, certificateId } = await createOrderAndPut(api, FRONT_RESTART, domain);

    const waiting = await waitFor('the proxy waiting for its certificate', async () => {
      const { attributes } = (await api.get(`${CONFIGS}/${id}`)).body.data;
      return attributes.statusDetail ? attributes : undefined;
    });
    assert.equal(waiting.status, 'PROVISIONING');
    assert.match(
      waiting.statusDetail,
      new RegExp(`certificate ${certificateId} is not issued yet \\(PENDING\\); the previous configuration is served until it is`),
    );
    assert.deepEqual(await plainGet(FRONT_RESTART, 80, '/waiting'), { status: 200, body: 'origin: GET /waiting' }, 'port 80 still serves');
    assert.equal(await plainGet(FRONT_RESTART, 443, '/'), undefined);
    // Port 80 stays this proxy's while it waits: no other proxy can take it.
    const taken = await api.call('POST', CONFIGS, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONT_RESTART, port: 80 }, backend } },
    });
    assert.equal(taken.status, 409);
    assert.equal(taken.body.errors[0].code, 'PORT_IN_USE');

    await first.stop();
    running.length = 0;
    silent.close();
    const second = await start({ TPS_DATA_DIR: dataDir });
    api = await TenantApi.connect(second, credentials);
    const issued = await certificateSettled(api, certificateId);
    assert.equal(issued.status, 'ISSUED', `${issued.statusDetail}\n${second.output().slice(-3000)}`);
    const root = await pebble.rootPem();
    assert.equal(
      await waitFor('HTTPS on port 443 after the restart', () => httpsGet(FRONT_RESTART, domain, root, '/after'), { timeoutMs: 60_000 }),
      'origin: GET /after',
    );
    await waitFor('ACTIVE', async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined));
  });
});
