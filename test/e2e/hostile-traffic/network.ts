/**
 * Hostile traffic against a started `tps serve` (edge on, two proxy workers), over real sockets:
 * mutual TLS with no CRL fetched yet, an HTTP/2 rapid reset, HTTP connection caps, a /64 rotation
 * against the rate limit, one proxy's flood against another proxy's block, a UDP amplification
 * attempt, and a burst of portal sign-ins.
 *
 * IPv6 clients: loopback has only ::1, so the rotating IPv6 clients come through a load balancer
 * the edge trusts (TPS_TRUSTED_PROXIES), naming them in X-Forwarded-For, as a CDN would.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net from 'node:net';
import { startTps, createTenant, type Tps } from '../../support/tps.ts';
import { TenantApi } from '../../support/api-client.ts';
import { freePort } from '../../support/ports.ts';
import { waitFor } from '../../support/wait.ts';
import { TestCa } from '../../support/pki.ts';
import { rapidReset } from '../../support/rapid-reset.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const FRONTEND = '127.0.2.1';
const ORIGIN = '127.0.2.2';
const CRL_HOST = '127.0.2.3';
/** The load balancer in front of the edge (TPS_TRUSTED_PROXIES). */
const LOAD_BALANCER = '127.0.2.4';
const CLIENT_A = '127.0.2.10';
const CLIENT_B = '127.0.2.11';
const CLIENT_C = '127.0.2.12';
const UDP_CLIENT = '127.0.2.14';
/** Sign-ins from many addresses (the API listens on 127.0.0.1; any loopback source reaches it). */
const SIGN_IN_NET = '127.0.3.';

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

function get(
  url: string,
  options: { localAddress?: string; headers?: Record<string, string>; agent?: http.Agent; ca?: string; cert?: string; key?: string } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const client = url.startsWith('https:') ? https : http;
    const req = client.get(
      url,
      {
        agent: options.agent ?? false,
        headers: { 'user-agent': 'Mozilla/5.0', accept: 'text/html', ...options.headers },
        ...(options.localAddress && { localAddress: options.localAddress }),
        ...(options.ca && { ca: options.ca, servername: 'shop.test' }),
        ...(options.cert && { cert: options.cert, key: options.key }),
      },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

/** The value of one Prometheus sample (0 when absent). */
async function metric(tps: Tps, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`)))
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

describe('hostile traffic against a started tps serve', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let originPort: number;
  let serverCa: TestCa;
  let certificateId: string;

  before(async () => {
    origin = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => response.end(`origin saw ${request.url}`));
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    originPort = (origin.address() as net.AddressInfo).port;
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_TRUSTED_PROXIES: `${LOAD_BALANCER}/32`,
        // Small shares, so that a flood of a few thousand sources overflows one.
        TPS_RATE_LIMIT_CLIENTS_PER_PROXY: '64',
        TPS_CRL_REFRESH_SECONDS: '10',
        TPS_PASSWORD_HASH_CONCURRENCY: '1',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
    serverCa = await TestCa.create('Server CA');
    const leaf = await serverCa.issue({ commonName: 'shop.test', dnsNames: ['shop.test'] });
    const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
      data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
    });
    assert.equal(certificate.status, 201, JSON.stringify(certificate.body));
    certificateId = certificate.body.data.id;
  });

  after(async () => {
    await tps.stop();
    origin.close();
  });

  async function createProxy(
    attributes: Record<string, unknown>,
    frontend: Record<string, unknown> = {},
    wait: 'ACTIVE' | 'ANY' = 'ACTIVE',
  ): Promise<{ id: string; url: string; port: number }> {
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
    if (wait === 'ACTIVE')
      await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE');
    return { id, url: `${frontend.certificateId ? 'https' : 'http'}://${FRONTEND}:${port}`, port };
  }

  it('refuses a revoked client certificate while no CRL could be fetched, and says why in the status', async () => {
    const clientCa = await TestCa.create('Client CA');
    const good = await clientCa.issue({ commonName: 'good client', client: true });
    const revoked = await clientCa.issue({ commonName: 'revoked client', client: true });
    clientCa.revoke(revoked.serialNumber);
    // The CRL server is down: nothing listens on its port yet.
    const crlPort = await freePort(CRL_HOST);
    const ca = await api.call('POST', '/api/v2/traffic-mgmt/ca-certificates', {
      data: {
        type: 'caCertificate',
        attributes: { certificates: [{ certificate: clientCa.certificatePem, crlUrl: `http://${CRL_HOST}:${crlPort}/ca.crl` }] },
      },
    });
    assert.equal(ca.status, 201, JSON.stringify(ca.body));
    const proxy = await createProxy(
      {},
      { certificateId, clientCertificateVerification: { mode: 'VERIFY_AND_REJECT', caCertificateIds: [ca.body.data.id], verifyCrl: true } },
      'ANY',
    );
    const status = await waitFor('the ERROR status', async () => {
      const attributes = (await api.get(`${CONFIGS}/${proxy.id}`)).body.data.attributes;
      return attributes.status === 'ERROR' ? attributes : undefined;
    });
    assert.match(status.statusDetail, /no CRL has been fetched yet/);
    assert.match(status.statusDetail, /are refused/);
    const attempt = (client: { certificatePem: string; privateKeyPem: string }) =>
      get(`${proxy.url}/`, { ca: serverCa.certificatePem, cert: client.certificatePem, key: client.privateKeyPem }).then(
        (reply) => reply.status,
        () => 'refused' as const,
      );
    // Served, and failing closed: the listener is up, every certificate of that CA is refused.
    assert.equal(await attempt(revoked), 'refused', 'the revoked certificate');
    assert.equal(await attempt(good), 'refused', 'and the good one, while revocation cannot be checked');

    // The CRL server comes back: at the next refresh the CRL is fetched, the proxy is ACTIVE again.
    const crlServer = http.createServer(async (_request, response) => response.end(await clientCa.crlPem()));
    await new Promise<void>((resolve) => crlServer.listen(crlPort, CRL_HOST, resolve));
    try {
      await waitFor(
        'ACTIVE once the CRL is fetched',
        async () => (await api.get(`${CONFIGS}/${proxy.id}`)).body.data.attributes.status === 'ACTIVE',
        {
          timeoutMs: 40_000,
        },
      );
      await waitFor('the good certificate to pass', async () => (await attempt(good)) === 200);
      assert.equal(await attempt(revoked), 'refused', 'the revoked one stays refused');
    } finally {
      crlServer.close();
    }
  });

  it('ends an HTTP/2 session that opens and resets 10,000 streams, and serves another client meanwhile', async () => {
    const proxy = await createProxy({}, { certificateId });
    const before = await metric(tps, 'tps_edge_refused_total', { protocol: 'HTTP/2', reason: 'RAPID_RESET' });
    const benign = http2.connect(proxy.url, { ca: serverCa.certificatePem, servername: 'shop.test' });
    benign.on('error', () => {});
    const served: number[] = [];
    let attacking = true;
    const benignLoop = (async () => {
      while (attacking) {
        served.push(
          await new Promise<number>((resolve) => {
            const stream = benign.request({ ':path': '/benign' });
            stream.on('response', (headers) => {
              stream.resume();
              stream.on('end', () => resolve(Number(headers[':status'])));
            });
            stream.on('error', () => resolve(0));
            stream.end();
          }),
        );
      }
    })();
    try {
      const attack = await rapidReset({
        host: FRONTEND,
        port: proxy.port,
        ca: serverCa.certificatePem,
        servername: 'shop.test',
        streams: 10_000,
      });
      // Ended: GOAWAY ENHANCE_YOUR_CALM from our bound (or nghttp2's own limit, when a burst is read in
      // one go), then the close. The GOAWAY itself may not reach a client whose frames the server
      // left unread (its kernel then answers with a reset); the count below says who ended it.
      assert.equal(attack.closed, true, `the attacking session was ended (${attack.streamsSent} streams written)`);
    } finally {
      attacking = false;
      await benignLoop;
      benign.close();
    }
    assert.ok(served.length > 0 && served.every((status) => status === 200), JSON.stringify(served));
    try {
      await waitFor(
        'the refusal counted',
        async () => (await metric(tps, 'tps_edge_refused_total', { protocol: 'HTTP/2', reason: 'RAPID_RESET' })) > before,
      );
    } catch (error) {
      // What the node did count instead, and what its worker logged, to tell why.
      const counted = (await (await fetch(`${tps.metricsUrl}/metrics`)).text())
        .split('\n')
        .filter((line) => line.startsWith('tps_edge_refused_total{'));
      const logged = tps
        .output()
        .split('\n')
        .filter((line) => /HTTP\/2|http2|session/i.test(line))
        .slice(-10);
      throw new Error(`${(error as Error).message}\ncounted:\n${counted.join('\n')}\nlogged:\n${logged.join('\n')}`);
    }
  });

  it('holds per-source and total connection caps across both workers, and counts the refusals', async () => {
    const proxy = await createProxy({ connectionLimits: { maxConnectionsPerSource: 3, maxConnections: 5 } });
    const held: net.Socket[] = [];
    /** One request on a new kept-alive connection from `localAddress`; a served connection stays open. */
    const attempt = (localAddress: string) =>
      new Promise<'served' | 'refused'>((resolve) => {
        const socket = net.connect({ host: FRONTEND, port: proxy.port, localAddress }, () =>
          socket.write('GET /held HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\nAccept: text/html\r\n\r\n'),
        );
        socket.on('data', (chunk: Buffer) => {
          if (!chunk.toString('latin1').startsWith('HTTP/1.1 200')) return;
          held.push(socket);
          resolve('served');
        });
        socket.on('error', () => {});
        socket.on('close', () => resolve('refused'));
      });
    try {
      const fromA = [await attempt(CLIENT_A), await attempt(CLIENT_A), await attempt(CLIENT_A), await attempt(CLIENT_A)];
      assert.deepEqual(fromA, ['served', 'served', 'served', 'refused'], 'three connections from one source, whichever worker took them');
      assert.deepEqual([await attempt(CLIENT_B), await attempt(CLIENT_B)], ['served', 'served']);
      assert.equal(await attempt(CLIENT_C), 'refused', 'five connections to the proxy in all');
      held.shift()!.destroy();
      await waitFor('the freed place', async () => (await attempt(CLIENT_C)) === 'served');
    } finally {
      for (const socket of held) socket.destroy();
    }
    await waitFor('both refusals counted', async () => {
      const perSource = await metric(tps, 'tps_edge_refused_total', { proxy: proxy.id, protocol: 'HTTP', reason: 'SOURCE_CONNECTIONS' });
      const total = await metric(tps, 'tps_edge_refused_total', { proxy: proxy.id, protocol: 'HTTP', reason: 'GLOBAL_CONNECTIONS' });
      return perSource >= 1 && total >= 1;
    });
  });

  it('counts IPv6 clients rotating through one /64 as one client', async () => {
    const proxy = await createProxy({ rateLimiting: { thresholds: [{ requests: 10, periodSeconds: 60 }], blockSeconds: 60 } });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
    try {
      const statuses: number[] = [];
      for (let i = 1; i <= 20; i++) {
        // A new address of the same /64 for every request.
        const address = `2001:db8:aa:bb:${((i * 7919) & 0xffff).toString(16)}:${i.toString(16)}:0:${(i * 31).toString(16)}`;
        statuses.push(
          (await get(`${proxy.url}/rotate-${i}`, { agent, localAddress: LOAD_BALANCER, headers: { 'x-forwarded-for': address } })).status,
        );
      }
      assert.deepEqual(statuses.slice(0, 10), Array(10).fill(200));
      assert.ok(
        statuses.slice(10).every((status) => status === 429),
        JSON.stringify(statuses),
      );
      const neighbour = await get(`${proxy.url}/other`, {
        agent,
        localAddress: LOAD_BALANCER,
        headers: { 'x-forwarded-for': '2001:db8:aa:cc::1' },
      });
      assert.equal(neighbour.status, 200, 'another /64 is another client');
    } finally {
      agent.destroy();
    }
  });

  it("leaves one proxy's block in force while a flood of sources hits another proxy", async () => {
    const limited = { rateLimiting: { thresholds: [{ requests: 5, periodSeconds: 60 }], blockSeconds: 300 } };
    const guarded = await createProxy(limited);
    const flooded = await createProxy(limited);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    const from = (client: string) => ({ agent, localAddress: LOAD_BALANCER, headers: { 'x-forwarded-for': client } });
    try {
      for (let i = 0; i < 6; i++) await get(`${guarded.url}/`, from('198.51.100.77'));
      assert.equal((await get(`${guarded.url}/`, from('198.51.100.77'))).status, 429, 'blocked on the guarded proxy');
      // 2,000 sources on the other proxy: thirty times its share of 64 clients.
      for (let batch = 0; batch < 2_000; batch += 50) {
        await Promise.all(
          Array.from({ length: 50 }, (_, i) => get(`${flooded.url}/flood`, from(`10.77.${(batch + i) >> 8}.${(batch + i) & 255}`))),
        );
      }
      assert.equal((await get(`${guarded.url}/`, from('198.51.100.77'))).status, 429, 'the block is still in force');
    } finally {
      agent.destroy();
    }
  });

  it('sends a UDP client that never shows it receives at most the reply budget (3x its bytes), and counts the drops', async () => {
    // An origin that answers every datagram with ten 1,000-byte replies: an amplifier.
    const amplifier = createSocket('udp4');
    amplifier.on('message', (_message, rinfo) => {
      for (let i = 0; i < 10; i++) amplifier.send(randomBytes(1000), rinfo.port, rinfo.address);
    });
    await new Promise<void>((resolve) => amplifier.bind(0, ORIGIN, resolve));
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'l4Proxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: amplifier.address().port }] },
          protocols: ['UDP'],
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () => (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE');
    // The "victim": its address is used by somebody else's queries; it never sends anything back.
    const victim = createSocket('udp4');
    let received = 0;
    victim.on('message', (reply) => (received += reply.length));
    await new Promise<void>((resolve) => victim.bind(0, UDP_CLIENT, resolve));
    try {
      const sent = 3 * 400;
      for (let i = 0; i < 3; i++) victim.send(Buffer.alloc(400, 0x71), port, FRONTEND);
      await waitFor(
        'the replies dropped over the budget to be counted',
        async () => (await metric(tps, 'tps_edge_dropped_total', { proxy: id, protocol: 'UDP', reason: 'REPLY_BUDGET' })) >= 27,
      );
      assert.ok(received <= 3 * sent, `${received} bytes back for ${sent} sent`);
      assert.ok(received > 0, 'what fits the budget is delivered');
    } finally {
      victim.close();
      amplifier.close();
    }
  });

  it('bounds a burst of sign-ins: throttle places are taken before hashing, and hashing has a short queue', async () => {
    const email = `burst-${Date.now()}@example.com`;
    await tps.cli('user', 'create', '--tenant', api.tenantId, '--email', email, '--password', 'the right password');
    const signIn = (body: { email: string; password: string }, localAddress?: string) =>
      new Promise<number>((resolve, reject) => {
        const payload = JSON.stringify(body);
        const target = new URL(`${tps.url}/portal/api/login`);
        const req = http.request(
          {
            host: target.hostname,
            port: target.port,
            path: target.pathname,
            method: 'POST',
            headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
            ...(localAddress && { localAddress }),
          },
          (response) => {
            response.resume();
            response.on('end', () => resolve(response.statusCode ?? 0));
          },
        );
        req.on('error', reject);
        req.end(payload);
      });
    // Twenty wrong passwords for one email at once, from one address: five are checked, the rest refused unhashed.
    const burst = await Promise.all(Array.from({ length: 20 }, (_, i) => signIn({ email, password: `wrong ${i}` }, `${SIGN_IN_NET}1`)));
    assert.equal(burst.filter((status) => status === 401).length, 5, JSON.stringify(burst));
    assert.equal(burst.filter((status) => status === 429).length, 15, JSON.stringify(burst));
    // Thirty sign-ins from thirty addresses at once: one hash at a time (TPS_PASSWORD_HASH_CONCURRENCY=1), eight
    // waiting; the others are answered 503 at once rather than piling up.
    const spread = await Promise.all(
      Array.from({ length: 30 }, (_, i) => signIn({ email: `nobody-${i}@example.com`, password: 'guess' }, `${SIGN_IN_NET}${10 + i}`)),
    );
    assert.ok(
      spread.every((status) => status === 401 || status === 503),
      JSON.stringify(spread),
    );
    const busy = spread.filter((status) => status === 503).length;
    assert.ok(busy > 0, `thirty at once against one running and eight waiting: ${JSON.stringify(spread)}`);
    assert.equal(await metric(tps, 'tps_portal_sign_ins_refused_total', { reason: 'THROTTLED' }), 15);
    assert.equal(await metric(tps, 'tps_portal_sign_ins_refused_total', { reason: 'BUSY' }), busy);
    // The throttle is per email and address: the account itself is not locked for its owner elsewhere.
    assert.equal(await signIn({ email, password: 'the right password' }, `${SIGN_IN_NET}2`), 200);
  });

  it('limits calls without a token per client address', async () => {
    const jwks = (localAddress: string) =>
      new Promise<number>((resolve, reject) => {
        http
          .get(`${tps.url}/.well-known/jwks.json`, { localAddress, agent: false }, (response) => {
            response.resume();
            response.on('end', () => resolve(response.statusCode ?? 0));
          })
          .on('error', reject);
      });
    const statuses: number[] = [];
    for (let i = 0; i < 320; i++) {
      statuses.push(await jwks(`${SIGN_IN_NET}200`));
      if (statuses.at(-1) === 429) break;
    }
    assert.equal(statuses.at(-1), 429, 'the 301st call in a minute');
    assert.equal(statuses.length, 301);
    assert.equal(await jwks(`${SIGN_IN_NET}201`), 200, 'another address is not affected');
    assert.ok((await metric(tps, 'tps_api_rate_limited_total', { key: 'ip' })) >= 1);
  });
});
