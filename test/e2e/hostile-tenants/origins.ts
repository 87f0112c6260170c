/**
 * Hostile tenants, where the service connects on their behalf (DESIGN.md, "Hostile input"): a
 * tenant names its proxies' origins and its CA certificates' CRL URLs, and must not reach the cloud
 * metadata service, internal networks, nor the service's own listeners and store through them.
 *
 * Against a started `tps serve` with its edge, over real sockets: literal internal addresses are
 * refused at the API (422 ORIGIN_NOT_ALLOWED); a DNS name (answered by a DNS server the test runs,
 * TPS_ORIGIN_RESOLVER) that resolves to one is refused at connect time, so the HTTP client gets 502,
 * the layer 4 client a closed connection, and the internal listener never sees a connection; the
 * refusals are counted on the operators' listener. A crlUrl at an internal address is never
 * fetched, directly or through a redirect, and the tenant sees only a generic error.
 *
 * The operator opened 127.0.0.208/28 and 127.0.0.1 for origins: inside them, the service's own
 * listeners (API, metrics, front-end IP, PostgreSQL and Redis hosts) stay refused.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import http from 'node:http';
import net from 'node:net';
import { startTps, createTenant, type Tps } from '../../support/tps.ts';
import { TenantApi, type Answer, type ErrorBody } from '../../support/api-client.ts';
import { startTestDns, type TestDns } from '../../support/dns-server.ts';
import { TestCa } from '../../support/pki.ts';
import { waitFor } from '../../support/wait.ts';
import { freePort } from '../../support/ports.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const CA_CERTIFICATES = '/api/v2/traffic-mgmt/ca-certificates';
const ALLOWED_NETWORKS = '127.0.0.208/28,127.0.0.1/32';
const DNS_IP = '127.0.0.209';
const API_IP = '127.0.0.210';
const METRICS_IP = '127.0.0.211';
const FRONTEND = '127.0.0.212';
const REDIS_IP = '127.0.0.213';
const REDIS_PORT = 6399;
const ORIGIN_IP = '127.0.0.214';
/** Loopback outside the allowed networks: stands for an internal service. */
const INTERNAL_IP = '127.0.0.224';

/** A TCP listener that counts every connection made to it (and closes it). */
interface Watched {
  port: number;
  connections: number;
  close(): Promise<void>;
}

async function watchedListener(host: string, port = 0): Promise<Watched> {
  const state = { connections: 0 };
  const server = net.createServer((socket) => {
    state.connections++;
    socket.on('error', () => {});
    socket.end('HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\ninternal');
  });
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    get connections() {
      return state.connections;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function portOf(url: string): number {
  return Number(new URL(url).port);
}

/** Status of a request through the edge; `body` sends a chunked body (it then streams to the origin). */
function statusOf(url: string, body?: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: body ? 'POST' : 'GET', agent: false }, (response) => {
      response.resume();
      response.on('end', () => resolve(response.statusCode ?? 0));
    });
    request.on('error', reject);
    if (body) {
      request.write(body.subarray(0, body.length / 2));
      request.end(body.subarray(body.length / 2));
    } else request.end();
  });
}

/** The first line the edge answers to a WebSocket upgrade request. */
function upgradeStatusLine(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (text.includes('\r\n')) {
        socket.destroy();
        resolve(text.slice(0, text.indexOf('\r\n')));
      }
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(text.split('\r\n')[0] ?? ''));
    socket.write(
      'GET /chat HTTP/1.1\r\nHost: chat.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n' +
        'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    );
  });
}

/** 'CLOSED' when the edge closes a TCP connection without a byte, else what came back. */
function l4Outcome(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: FRONTEND, port });
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
    socket.on('error', () => {});
    socket.on('close', () => resolve(text === '' ? 'CLOSED' : text));
    socket.write('hello');
  });
}

function originErrors(answer: Answer): ErrorBody['errors'] {
  assert.equal(answer.status, 422, JSON.stringify(answer.body));
  return (answer.body as ErrorBody).errors.filter((error) => error.code === 'ORIGIN_NOT_ALLOWED');
}

describe('hostile tenants: where the service connects on their behalf', () => {
  let tps: Tps;
  let api: TenantApi;
  let dns: TestDns;
  let internal: Watched;
  let internalOnFrontend: Watched;
  let origin: http.Server;
  let originPort: number;
  let apiPort: number;
  let metricsPort: number;
  let postgresPort: number;

  before(async () => {
    dns = await startTestDns(DNS_IP);
    internal = await watchedListener(INTERNAL_IP);
    // Another service on the front-end IP (a front-end IP is refused at any port).
    internalOnFrontend = await watchedListener(FRONTEND);
    origin = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => response.end(`origin saw ${request.method} ${request.url}`));
    });
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN_IP, resolve));
    originPort = (origin.address() as net.AddressInfo).port;
    tps = await startTps({
      store: 'postgres',
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '1',
        TPS_API_LISTEN: `${API_IP}:0`,
        TPS_METRICS_LISTEN: `${METRICS_IP}:0`,
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_REDIS_URL: `redis://${REDIS_IP}:${REDIS_PORT}`,
        TPS_ORIGIN_ALLOWED_NETWORKS: ALLOWED_NETWORKS,
        TPS_ORIGIN_RESOLVER: dns.server,
        // A POST body larger than this, inspected in part, streams to the origin through the undici pool.
        TPS_WAF_REQUEST_BODY_LIMIT: '1024',
        TPS_WAF_BODY_LIMIT_ACTION: 'PROCESS_PARTIAL',
      },
    });
    apiPort = portOf(tps.url);
    metricsPort = portOf(tps.metricsUrl);
    postgresPort = portOf(tps.env.TPS_DATABASE_URL!);
    dns.set('good.test', [ORIGIN_IP]);
    dns.set('internal.test', [INTERNAL_IP]);
    dns.set('metadata.test', ['169.254.169.254']);
    dns.set('frontend.test', [FRONTEND]);
    dns.set('api.test', [API_IP]);
    api = await TenantApi.connect(tps, await createTenant(tps));
  });
  after(async () => {
    await tps?.stop();
    origin?.close();
    await Promise.all([dns?.close(), internal?.close(), internalOnFrontend?.close()]);
  });

  async function createProxy(
    type: 'httpProxy' | 'l4Proxy',
    hosts: { address: string; port: number }[],
    extra: Record<string, unknown> = {},
  ) {
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: { type, attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts }, ...extra } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor(`${type} ${id} ACTIVE`, async () =>
      (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined,
    );
    return { id, port, url: `http://${FRONTEND}:${port}` };
  }

  /** The value of `tps_edge_origin_refused_total` for one proxy and reason (0 when absent). */
  async function refusedCount(proxyId: string, reason: string): Promise<number> {
    const text = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
    const line = text
      .split('\n')
      .find((l) => l.startsWith('tps_edge_origin_refused_total{') && l.includes(`proxy="${proxyId}"`) && l.includes(`reason="${reason}"`));
    return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
  }

  it('refuses every class of internal address as an origin at the API, with a pointer to each', async () => {
    const refused: [address: string, port: number, why: RegExp][] = [
      ['169.254.169.254', 80, /link-local/],
      ['169.254.43518', 80, /link-local/], // a legacy spelling of the metadata address
      ['127.0.0.2', 8080, /loopback/],
      ['::1', 8080, /loopback/],
      ['10.0.0.1', 80, /private/],
      ['172.16.0.1', 80, /private/],
      ['192.168.0.1', 80, /private/],
      ['fd00::1', 80, /private/],
      ['fe80::1', 80, /link-local/],
      ['100.64.0.1', 80, /shared address space/],
      ['224.0.0.1', 80, /multicast/],
      ['ff02::1', 80, /multicast/],
      ['0.0.0.0', 80, /unspecified/],
      ['0.1.2.3', 80, /unspecified/],
      ['::', 80, /unspecified/],
      ['255.255.255.255', 80, /broadcast/],
      ['::ffff:169.254.169.254', 80, /link-local/],
      ['::ffff:7f00:2', 80, /loopback/],
      ['::ffff:10.0.0.1', 80, /private/],
      // The service's own, although inside the allowed networks:
      [FRONTEND, 12345, /service's own/],
      [API_IP, apiPort, /service's own/],
      [`::ffff:${API_IP}`, apiPort, /service's own/],
      [METRICS_IP, metricsPort, /service's own/],
      ['127.0.0.1', postgresPort, /service's own/],
      ['127.0.0.1', 22, /service's own/], // the database host at any port
      ['2130706433', 5432, /service's own/], // 127.0.0.1, spelled as a number
      [REDIS_IP, REDIS_PORT, /service's own/],
      [REDIS_IP, 80, /service's own/],
    ];
    const hosts = refused.map(([address, port]) => ({ address, port }));
    for (const type of ['httpProxy', 'l4Proxy'] as const) {
      const answer = await api.call('POST', CONFIGS, {
        data: { type, attributes: { frontend: { ipv4: FRONTEND, port: 4001 }, backend: { hosts } } },
      });
      const errors = originErrors(answer);
      for (const [index, [address, , why]] of refused.entries()) {
        const error = errors.find((candidate) => candidate.source?.pointer === `/data/attributes/backend/hosts/${index}/address`);
        assert.ok(error, `${type}: ${address} refused at hosts/${index}: ${JSON.stringify(answer.body)}`);
        // One wording for every class: the class (`why`) is the operator's, in the log only.
        assert.equal(error.detail, errors[0]!.detail, `${address} (${why}) reads as every other refusal`);
        assert.equal(error.status, '422');
      }
      assert.equal(errors.length, refused.length, 'nothing else refused');
    }
    assert.deepEqual((await api.get(CONFIGS)).body.data, [], 'nothing was created');

    // The same addresses at other ports, addresses in the allowed networks, and names (checked at
    // connect time) are accepted.
    const accepted = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port: 4002 },
          backend: {
            hosts: [
              { address: API_IP, port: apiPort + 1 },
              { address: ORIGIN_IP, port: originPort },
              { address: 'internal.test', port: 80 },
            ],
          },
        },
      },
    });
    assert.equal(accepted.status, 201, JSON.stringify(accepted.body));
    const id = accepted.body.data.id as string;

    // PUT and PATCH are checked the same way, and a refused change changes nothing.
    const put = await api.call('PUT', `${CONFIGS}/${id}`, {
      data: {
        type: 'httpProxy',
        attributes: { frontend: { ipv4: FRONTEND, port: 4002 }, backend: { hosts: [{ address: '169.254.169.254', port: 80 }] } },
      },
    });
    assert.equal(originErrors(put)[0]?.source?.pointer, '/data/attributes/backend/hosts/0/address');
    const patch = await api.call('PATCH', `${CONFIGS}/${id}`, {
      data: {
        type: 'httpProxy',
        attributes: {
          backend: {
            hosts: [
              { address: ORIGIN_IP, port: originPort },
              { address: METRICS_IP, port: metricsPort },
            ],
          },
        },
      },
    });
    assert.equal(originErrors(patch)[0]?.source?.pointer, '/data/attributes/backend/hosts/1/address');
    const stored = (await api.get(`${CONFIGS}/${id}`)).body.data.attributes.backend.hosts;
    assert.equal(stored.length, 3, 'the refused PUT and PATCH changed nothing');
    assert.equal((await api.call('DELETE', `${CONFIGS}/${id}`)).status, 204);
  });

  it('refuses at connect time a name that resolves to an internal address: 502, and the internal listener sees nothing', async () => {
    const good = await createProxy('httpProxy', [{ address: 'good.test', port: originPort }]);
    assert.equal(await statusOf(`${good.url}/through-a-name`), 200, 'a name resolving to an allowed address is proxied');

    const before = { internal: internal.connections, frontend: internalOnFrontend.connections };
    const toInternal = await createProxy('httpProxy', [{ address: 'internal.test', port: internal.port }]);
    assert.equal(await statusOf(`${toInternal.url}/`), 502, 'a request without a body (the keep-alive client)');
    assert.equal(await statusOf(`${toInternal.url}/upload`, Buffer.alloc(8 * 1024, 0x61)), 502, 'a streamed body (the undici pool)');
    assert.match(await upgradeStatusLine(FRONTEND, toInternal.port), /^HTTP\/1\.1 502 /, 'a WebSocket upgrade');

    const toFrontend = await createProxy('httpProxy', [{ address: 'frontend.test', port: internalOnFrontend.port }]);
    assert.equal(await statusOf(`${toFrontend.url}/`), 502);
    const toApi = await createProxy('httpProxy', [{ address: 'api.test', port: apiPort }]);
    assert.equal(await statusOf(`${toApi.url}/api/v2/traffic-mgmt/traffic-configs`), 502);
    const toMetadata = await createProxy('httpProxy', [{ address: 'metadata.test', port: 80 }]);
    assert.equal(await statusOf(`${toMetadata.url}/latest/meta-data/`), 502);

    assert.equal(internal.connections, before.internal, 'the internal listener saw no connection');
    assert.equal(internalOnFrontend.connections, before.frontend, 'the listener on the front-end IP saw no connection');

    // Counted on the operators' listener, by proxy and class of address.
    await waitFor('the refusals counted', async () => {
      const counts = await Promise.all([
        refusedCount(toInternal.id, 'loopback'),
        refusedCount(toFrontend.id, 'own-listener'),
        refusedCount(toApi.id, 'own-listener'),
        refusedCount(toMetadata.id, 'link-local'),
      ]);
      return counts[0]! >= 3 && counts.slice(1).every((count) => count >= 1) ? true : undefined;
    });
    // And logged by the edge worker, with the proxy and what was refused.
    const logged = tps
      .output()
      .split('\n')
      .find((line) => line.includes('origin refused by the origin policy') && line.includes(toInternal.id));
    assert.ok(logged, 'the refusal is in the log');
    assert.match(logged, /"host":"internal\.test".*"address":"127\.0\.0\.224".*"reason":"loopback"/);
  });

  it('closes a layer 4 connection whose origin name resolves to an internal address, and counts it', async () => {
    const before = internal.connections;
    const tcp = await createProxy('l4Proxy', [{ address: 'internal.test', port: internal.port }]);
    assert.equal(await l4Outcome(tcp.port), 'CLOSED');
    assert.equal(internal.connections, before, 'the internal listener saw no connection');
    await waitFor('the TCP refusal counted', async () => ((await refusedCount(tcp.id, 'loopback')) >= 1 ? true : undefined));

    const received: Buffer[] = [];
    const internalUdp = dgram.createSocket('udp4');
    internalUdp.on('message', (message) => received.push(message));
    await new Promise<void>((resolve) => internalUdp.bind(0, INTERNAL_IP, resolve));
    try {
      const udp = await createProxy('l4Proxy', [{ address: 'internal.test', port: internalUdp.address().port }], { protocols: ['UDP'] });
      const client = dgram.createSocket('udp4');
      try {
        client.send('hello', udp.port, FRONTEND);
        await waitFor('the UDP refusal counted', async () => ((await refusedCount(udp.id, 'loopback')) >= 1 ? true : undefined));
      } finally {
        client.close();
      }
      assert.deepEqual(received, [], 'no datagram reached the internal socket');
    } finally {
      internalUdp.close();
    }
  });

  it('never fetches a crlUrl at an internal address, directly or through a redirect, and tells the tenant only that it failed', async () => {
    const ca = await TestCa.create('Hostile tenant CA');
    const upload = (crlUrls: string[]) =>
      api.call('POST', CA_CERTIFICATES, {
        data: {
          type: 'caCertificate',
          attributes: { certificates: crlUrls.map((crlUrl) => ({ certificate: ca.certificatePem, crlUrl })) },
        },
      });

    // Literal internal addresses: refused at the upload.
    const literal = [
      'http://169.254.169.254/latest/meta-data/',
      `http://[::ffff:${INTERNAL_IP}]:${internal.port}/ca.crl`,
      `http://${API_IP}:${apiPort}/ca.crl`,
      'http://2130706433/ca.crl',
    ];
    const errors = originErrors(await upload(literal));
    assert.deepEqual(
      errors.map((error) => error.source?.pointer),
      literal.map((_url, index) => `/data/attributes/certificates/${index}/crlUrl`),
    );

    // A name that resolves to an internal address, and an allowed server that redirects to one:
    // accepted at the upload (nothing to check yet), refused at every fetch.
    const redirector = http.createServer((request, response) => {
      if (request.url === '/redirect') response.writeHead(302, { location: `http://${INTERNAL_IP}:${internal.port}/ca.crl` }).end();
      else response.writeHead(404).end();
    });
    await new Promise<void>((resolve) => redirector.listen(0, ORIGIN_IP, resolve));
    const redirectorPort = (redirector.address() as net.AddressInfo).port;
    try {
      const before = internal.connections;
      const created = await upload([
        `http://internal.test:${internal.port}/ca.crl`,
        `http://${ORIGIN_IP}:${redirectorPort}/redirect`,
        `http://${ORIGIN_IP}:${redirectorPort}/missing.crl`, // an ordinary failure, for comparison
      ]);
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.data.id as string;
      const statuses = await waitFor(
        'the CRL fetches attempted',
        async () => {
          const entries = (await api.get(`${CA_CERTIFICATES}/${id}`)).body.data.attributes.certificates as {
            crl?: { attemptedAt?: string; error: string | null };
          }[];
          return entries.every((entry) => entry.crl?.attemptedAt) ? entries.map((entry) => entry.crl!) : undefined;
        },
        { timeoutMs: 30_000 },
      ).catch((e) => {
        console.log(
          tps
            .output()
            .split('\n')
            .filter((l) => /crl|CRL/.test(l))
            .join('\n'),
        );
        throw e;
      });
      assert.equal(internal.connections, before, 'the internal listener saw no connection');
      const [byName, byRedirect, missing] = statuses.map((status) => status.error);
      assert.ok(byName && !/127\.0\.0|refused|loopback|internal/i.test(byName), `generic: ${byName}`);
      assert.equal(byRedirect, byName, 'a redirect to an internal address reads the same');
      assert.equal(missing, byName, 'and the same as a plain 404: nothing tells what answers where');
      const logged = tps
        .output()
        .split('\n')
        .filter((line) => line.includes('origin refused by the origin policy') && line.includes('"scope":"crl"'));
      assert.equal(logged.length >= 2, true, "the operator's log has the reason, for the name and for the redirect");
      assert.match(tps.output(), /answered HTTP 404.*crl: fetch failed/, 'and the plain failure too');
    } finally {
      redirector.close();
    }
  });
});
