/**
 * HTTP proxies live from the API: TLS with an uploaded certificate, the WAF (ModSecurity + CRS)
 * blocking and logging, geo fencing, rate limiting, the client address behind a trusted load
 * balancer, and the insight events they produce, through a started `tps serve` with two proxy workers.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';
import { TestCa } from '../support/pki.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.0.51';
const ORIGIN = '127.0.0.52';
const CLIENT_IN_KP = '127.0.0.53';
const CLIENT_IN_DE = '127.0.0.54';
const FLOODER = '127.0.0.55';
/** A load balancer in front of the edge (TPS_TRUSTED_PROXIES). */
const LOAD_BALANCER = '127.0.0.57';

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

interface GetOptions {
  localAddress?: string;
  ca?: string;
  headers?: Record<string, string>;
  clientCertificate?: { certificatePem: string; privateKeyPem: string };
}

function get(url: string, options: GetOptions = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const client = url.startsWith('https:') ? https : http;
    const request = client.get(
      url,
      {
        agent: false,
        headers: options.headers,
        ...(options.localAddress && { localAddress: options.localAddress }),
        ...(options.ca && { ca: options.ca, servername: 'shop.test' }),
        ...(options.clientCertificate && { cert: options.clientCertificate.certificatePem, key: options.clientCertificate.privateKeyPem }),
      },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
      },
    );
    request.setTimeout(10_000, () => request.destroy(new Error('timeout')));
    request.on('error', reject);
  });
}

async function events(api: TenantApi, type: string): Promise<any[]> {
  return (await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=${type}&page[size]=1000`)).body.data;
}

function postForm(url: string, body: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      url,
      {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'Mozilla/5.0', accept: '*/*' },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body: text }));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

describe('HTTP proxies from the API', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let originPort: number;
  let originRequests: string[];
  let dir: string;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tps-http-'));
    fs.writeFileSync(path.join(dir, 'geo.csv'), `${CLIENT_IN_KP}/32,KP\n${CLIENT_IN_DE}/32,DE\n`);
    originRequests = [];
    origin = http.createServer((request, response) => {
      originRequests.push(request.url ?? '');
      response.setHeader('content-type', 'text/plain');
      response.end(`origin saw ${request.method} ${request.url} from ${request.headers['x-forwarded-for']}`);
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    originPort = (origin.address() as { port: number }).port;
    tps = await startTps({
      env: {
        // Origins (and CRL servers) run on loopback, which the origin policy refuses unless allowed.
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_GEO_OVERRIDES: path.join(dir, 'geo.csv'),
        TPS_WAF_AUDIT_LOG: path.join(dir, 'waf-audit.jsonl'),
        TPS_TRUSTED_PROXIES: `${LOAD_BALANCER}/32`,
        TPS_LISTENER_PROXY_PROTOCOL: 'optional',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(async () => {
    await tps.stop();
    origin.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function createProxy(
    attributes: Record<string, unknown>,
    frontend: Record<string, unknown> = {},
  ): Promise<{ id: string; url: string }> {
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port, ...frontend },
          backend: { hosts: [{ address: ORIGIN, port: originPort }] },
          ...attributes,
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined));
    const scheme = frontend.certificateId ? 'https' : 'http';
    return { id, url: `${scheme}://${FRONTEND}:${port}` };
  }

  it('serves HTTPS with the uploaded certificate and proxies to the origin', async () => {
    const ca = await TestCa.create();
    const leaf = await ca.issue({ commonName: 'shop.test', dnsNames: ['shop.test'] });
    const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    const proxy = await createProxy({}, { certificateId: certificate.body.data.id });
    const reply = await get(`${proxy.url}/hello`, { ca: ca.certificatePem });
    assert.equal(reply.status, 200);
    assert.equal(reply.body, 'origin saw GET /hello from 127.0.0.1', 'X-Forwarded-For carries the client address');
  });

  it('serves a replaced certificate to new connections without a restart', async () => {
    const ca = await TestCa.create();
    const upload = async (commonName: string) => {
      const leaf = await ca.issue({ commonName, dnsNames: ['shop.test'] });
      const answer = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
        data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
      });
      return { id: answer.body.data.id as string, fingerprint: leaf.fingerprint256 };
    };
    const first = await upload('first.shop.test');
    const second = await upload('second.shop.test');
    const proxy = await createProxy({}, { certificateId: first.id });
    const served = () =>
      new Promise<string>((resolve, reject) => {
        const request = https.get(`${proxy.url}/`, { agent: false, ca: ca.certificatePem, servername: 'shop.test' }, (response) => {
          resolve((response.socket as import('node:tls').TLSSocket).getPeerCertificate().fingerprint256);
          response.resume();
        });
        request.on('error', reject);
      });
    assert.equal(await served(), first.fingerprint);
    await api.call('PATCH', `${CONFIGS}/${proxy.id}`, {
      data: { type: 'httpProxy', attributes: { frontend: { certificateId: second.id } } },
    });
    await waitFor('the new certificate', async () => ((await served()) === second.fingerprint ? true : undefined));
  });

  it('verifies client certificates (mutual TLS) against the uploaded CA and its CRL', async () => {
    const clientCa = await TestCa.create('Client CA');
    const good = await clientCa.issue({ commonName: 'good client', client: true });
    const revoked = await clientCa.issue({ commonName: 'revoked client', client: true });
    const stranger = await (await TestCa.create('Unknown CA')).issue({ commonName: 'stranger', client: true });
    clientCa.revoke(revoked.serialNumber);
    const crlServer = http.createServer(async (_request, response) => response.end(await clientCa.crlPem()));
    await new Promise<void>((resolve) => crlServer.listen(0, '127.0.0.56', resolve));
    const crlUrl = `http://127.0.0.56:${(crlServer.address() as { port: number }).port}/client-ca.crl`;

    const serverCa = await TestCa.create();
    const leaf = await serverCa.issue({ commonName: 'shop.test', dnsNames: ['shop.test'] });
    const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    const ca = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: { type: 'caCertificate', attributes: { certificates: [{ certificate: clientCa.certificatePem, crlUrl }] } },
    });
    const proxy = await createProxy(
      {},
      {
        certificateId: certificate.body.data.id,
        clientCertificateVerification: { mode: 'VERIFY_AND_REJECT', caCertificateIds: [ca.body.data.id], verifyCrl: true },
      },
    );
    const attempt = (clientCertificate?: { certificatePem: string; privateKeyPem: string }) =>
      get(`${proxy.url}/`, { ca: serverCa.certificatePem, ...(clientCertificate && { clientCertificate }) }).then(
        (reply) => reply.status,
        () => 'refused' as const,
      );
    assert.equal(await attempt(good), 200);
    assert.equal(await attempt(), 'refused', 'no client certificate, no request');
    assert.equal(await attempt(stranger), 'refused', 'a certificate of another CA is refused');
    await waitFor('the CRL to be fetched and applied', async () => ((await attempt(revoked)) === 'refused' ? true : undefined));
    assert.equal(await attempt(good), 200, 'the good client still passes');
    crlServer.close();
  });

  it('blocks a SQL injection with the CRS in BLOCKING mode, before the origin, and reports a WAF_EVENT', async () => {
    const proxy = await createProxy({ waf: { mode: 'BLOCKING', paranoiaLevel: 1 } });
    const before = originRequests.length;
    const reply = await get(`${proxy.url}/search?id=1'%20OR%20'1'='1`, { headers: { 'user-agent': 'Mozilla/5.0' } });
    assert.equal(reply.status, 403);
    const supportId = /[0-9a-f]{32}/.exec(reply.body)?.[0];
    assert.ok(supportId, 'the block page shows the support id');
    assert.equal(originRequests.length, before, 'the origin never saw the request');

    const event = await waitFor('the WAF event', async () =>
      (await events(api, 'WAF_EVENT')).find((candidate) => candidate.attributes.supportId === supportId),
    );
    assert.equal(event.attributes.action, 'BLOCKED');
    assert.equal(event.attributes.request.statusCode, 403);
    assert.equal(event.attributes.request.method, 'GET');
    assert.equal(event.attributes.destinationIp, FRONTEND);
    assert.equal(event.attributes.source.ip, '127.0.0.1');
    assert.equal(event.attributes.tpc, 'TST');
    const sqli = event.attributes.rules.find((rule: any) => rule.modSecId === 942100);
    assert.ok(sqli, JSON.stringify(event.attributes.rules));
    assert.equal(sqli.matchedVariable, 'ARGS:id', 'the field to name in an exclusion');
    assert.ok(event.attributes.rules.every((rule: any) => rule.matchedData.status === 'DISABLED' && rule.matchedData.value === null));
    const audit = fs.readFileSync(path.join(dir, 'waf-audit.jsonl'), 'utf8');
    assert.match(audit, new RegExp(supportId), 'the audit log has the request');
  });

  it('lets the same attack through in LOGGING mode and logs it, and blocks again after a live switch', async () => {
    const proxy = await createProxy({ waf: { mode: 'LOGGING', paranoiaLevel: 1 } });
    const reply = await get(`${proxy.url}/page?q=<script>alert(1)</script>`);
    assert.equal(reply.status, 200);
    assert.match(reply.body, /origin saw GET/);
    await waitFor('the LOGGED event', async () =>
      (await events(api, 'WAF_EVENT')).find(
        (event) => event.attributes.action === 'LOGGED' && event.attributes.rules.some((rule: any) => rule.modSecId === 941100),
      ),
    );
    await api.call('PATCH', `${CONFIGS}/${proxy.id}`, { data: { type: 'httpProxy', attributes: { waf: { mode: 'BLOCKING' } } } });
    await waitFor('blocking after the PATCH', async () =>
      (await get(`${proxy.url}/page?q=<script>alert(1)</script>`)).status === 403 ? true : undefined,
    );
  });

  it('applies a paranoia level change live', async () => {
    const proxy = await createProxy({ waf: { mode: 'BLOCKING', paranoiaLevel: 1 } });
    // Markup in an argument: a paranoia 2 finding (941320, 942130), not a paranoia 1 one.
    const markup = `${proxy.url}/comment?q=%3Cb%3Ehi%3C/b%3E`;
    assert.equal((await get(markup, { headers: { 'user-agent': 'Mozilla/5.0' } })).status, 200);
    await api.call('PATCH', `${CONFIGS}/${proxy.id}`, { data: { type: 'httpProxy', attributes: { waf: { paranoiaLevel: 2 } } } });
    await waitFor('paranoia 2 to block', async () =>
      (await get(markup, { headers: { 'user-agent': 'Mozilla/5.0' } })).status === 403 ? true : undefined,
    );
  });

  it('blocks an XSS and a path traversal the same way (403 page with a support id, origin never reached), and passes a benign request with browser headers', async () => {
    const proxy = await createProxy({ waf: { mode: 'BLOCKING', paranoiaLevel: 1 } });
    for (const [attack, status] of [
      ['/page?q=<script>alert(1)</script>', 403],
      ['/download?file=../../../etc/passwd', 403],
      // Encoded slashes are ambiguous: refused (400 page) before the WAF (requestTarget.ambiguousPath).
      ['/static/..%2f..%2f..%2fetc%2fpasswd', 400],
    ] as const) {
      const before = originRequests.length;
      const reply = await get(`${proxy.url}${attack}`);
      assert.equal(reply.status, status, attack);
      assert.match(reply.body, /[0-9a-f]{32}/, `the block page shows the support id (${attack})`);
      assert.equal(originRequests.length, before, `the origin never saw ${attack}`);
    }
    const benign = await get(`${proxy.url}/products?page=2&sort=price`, {
      headers: {
        'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0',
        accept: 'text/html,application/xhtml+xml',
        'accept-language': 'en-US,en;q=0.5',
      },
    });
    assert.equal(benign.status, 200);
  });

  it('silences one rule for one field with an exclusion', async () => {
    const proxy = await createProxy({
      waf: { mode: 'BLOCKING', paranoiaLevel: 1, ruleExclusions: [{ ruleIds: [930100, 930110, 930120, 932160], target: 'ARGS:file' }] },
    });
    // A form body, so that only the argument carries the payload (a query would also be in REQUEST_URI).
    assert.equal((await postForm(`${proxy.url}/download`, 'file=../../etc/passwd')).status, 200, 'the excluded field passes');
    assert.equal((await postForm(`${proxy.url}/download`, 'other=../../etc/passwd')).status, 403, 'another field is still inspected');
  });

  it('blocks listed countries and allows only listed countries', async () => {
    const blocking = await createProxy({ geoFencing: { mode: 'BLOCK_LISTED', countries: ['KP'] } });
    assert.equal((await get(`${blocking.url}/`, { localAddress: CLIENT_IN_KP })).status, 403);
    assert.equal((await get(`${blocking.url}/`, { localAddress: CLIENT_IN_DE })).status, 200);
    const allowing = await createProxy({ geoFencing: { mode: 'ALLOW_LISTED', countries: ['DE'] } });
    assert.equal((await get(`${allowing.url}/`, { localAddress: CLIENT_IN_DE })).status, 200);
    assert.equal((await get(`${allowing.url}/`, { localAddress: CLIENT_IN_KP })).status, 403);
  });

  it('behind a trusted load balancer, takes the client from its PROXY header or X-Forwarded-For, and from nobody else', async () => {
    const proxy = await createProxy({
      geoFencing: { mode: 'ALLOW_LISTED', countries: ['DE'] },
      waf: { mode: 'BLOCKING', paranoiaLevel: 1 },
    });
    const port = Number(new URL(proxy.url).port);
    /** One request on a connection from the load balancer, after a PROXY v1 header naming `client`. */
    const throughHeader = (client: string, target: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect({ host: FRONTEND, port, localAddress: LOAD_BALANCER }, () =>
          socket.write(
            `PROXY TCP4 ${client} ${FRONTEND} 40000 ${port}\r\nGET ${target} HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\nConnection: close\r\n\r\n`,
          ),
        );
        let text = '';
        socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
        socket.on('close', () => resolve(text));
        socket.on('error', reject);
      });
    const fromDe = await throughHeader(CLIENT_IN_DE, '/lb');
    assert.match(fromDe, /^HTTP\/1\.1 200 /);
    assert.match(
      fromDe,
      new RegExp(`origin saw GET /lb from ${CLIENT_IN_DE.replaceAll('.', '\\.')}$`),
      'the origin gets the client, not the load balancer',
    );
    assert.match(await throughHeader(CLIENT_IN_KP, '/lb'), /^HTTP\/1\.1 403 /, 'geo fencing sees the client in the header');
    // X-Forwarded-For: from the load balancer it counts, from anybody else it does not.
    assert.equal(
      (await get(`${proxy.url}/xff`, { localAddress: LOAD_BALANCER, headers: { 'x-forwarded-for': CLIENT_IN_DE } })).status,
      200,
    );
    assert.equal(
      (await get(`${proxy.url}/xff`, { localAddress: LOAD_BALANCER, headers: { 'x-forwarded-for': CLIENT_IN_KP } })).status,
      403,
    );
    assert.equal(
      (await get(`${proxy.url}/xff`, { localAddress: '127.0.0.1', headers: { 'x-forwarded-for': CLIENT_IN_DE } })).status,
      403,
      'a spoofed header changes nothing',
    );
    // The WAF and its event see the resolved client too.
    const blocked = await throughHeader(CLIENT_IN_DE, "/search?id=1'%20OR%20'1'='1");
    assert.match(blocked, /^HTTP\/1\.1 403 /);
    const supportId = /[0-9a-f]{32}/.exec(blocked)?.[0];
    const event = await waitFor('the WAF event', async () =>
      (await events(api, 'WAF_EVENT')).find((candidate) => candidate.attributes.supportId === supportId),
    );
    assert.equal(event.attributes.source.ip, CLIENT_IN_DE);
    assert.equal(event.attributes.source.port, 40000);
    const audit = fs
      .readFileSync(path.join(dir, 'waf-audit.jsonl'), 'utf8')
      .split('\n')
      .filter((line) => line.includes(supportId!))
      .map((line) => JSON.parse(line) as { client: { ip: string } });
    assert.deepEqual(
      audit.map((record) => record.client.ip),
      [CLIENT_IN_DE],
      'the WAF audit log too',
    );
  });

  it('rate limits a client across both workers, with one APP_DDOS_ATTACK event, and lets it back after blockSeconds', async () => {
    const proxy = await createProxy({ rateLimiting: { thresholds: [{ requests: 10, periodSeconds: 60 }], blockSeconds: 2 } });
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) statuses.push((await get(`${proxy.url}/r${i}`, { localAddress: FLOODER })).status);
    assert.deepEqual(statuses.slice(0, 10), Array(10).fill(200), 'ten requests pass, whichever worker serves them');
    assert.ok(
      statuses.slice(10).every((status) => status === 429),
      JSON.stringify(statuses),
    );
    const refused = await get(`${proxy.url}/again`, { localAddress: FLOODER });
    assert.equal(refused.status, 429);
    assert.ok(Number(refused.headers['retry-after']) >= 1);
    assert.equal((await get(`${proxy.url}/`, { localAddress: CLIENT_IN_DE })).status, 200, 'other clients are not affected');

    const episode = await waitFor('the episode event', async () => {
      const found = (await events(api, 'APP_DDOS_ATTACK')).filter((event) => event.attributes.source.ip === FLOODER);
      return found.length > 0 && found[0].attributes.rateLimit.blockedRequests >= 11 ? found : undefined;
    });
    assert.equal(episode.length, 1, 'one event per client and episode, not one per request or per worker');
    const [event] = episode;
    assert.equal(event.attributes.action, 'BLOCKED');
    assert.deepEqual(event.attributes.rateLimit.threshold, { requests: 10, periodSeconds: 60 });
    assert.match(refused.body, new RegExp(event.attributes.supportId), 'the 429 page shows the episode support id');

    await waitFor(
      'recovery after blockSeconds',
      async () => ((await get(`${proxy.url}/later`, { localAddress: FLOODER })).status === 200 ? true : undefined),
      { timeoutMs: 10_000 },
    );
  });
});

describe('the compiled WAF engine behind the proxy (TPS_WAF_ENGINE=compiled)', () => {
  let tps: Tps;
  let origin: http.Server;

  before(async () => {
    origin = http.createServer((_request, response) => response.end('origin'));
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_WAF_ENGINE: 'compiled',
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
      },
    });
  });
  after(async () => {
    await tps.stop();
    origin.close();
  });

  it('blocks an attack with the same rules and reports them', async () => {
    const api = await TenantApi.connect(tps, await createTenant(tps));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: (origin.address() as { port: number }).port }] },
        },
      },
    });
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE');
    assert.equal(
      (await get(`http://${FRONTEND}:${port}/products?page=2`, { headers: { 'user-agent': 'Mozilla/5.0', accept: 'text/html' } })).status,
      200,
    );
    const blocked = await get(`http://${FRONTEND}:${port}/search?id=1'%20OR%20'1'='1`, { headers: { 'user-agent': 'Mozilla/5.0' } });
    assert.equal(blocked.status, 403);
    const event = await waitFor('the WAF event', async () => (await events(api, 'WAF_EVENT'))[0]);
    assert.ok(
      event.attributes.rules.some((rule: any) => rule.modSecId === 942100),
      JSON.stringify(event.attributes.rules),
    );
  });
});
