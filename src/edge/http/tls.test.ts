/**
 * The front-end TLS segment over real sockets: the configured certificate, a live certificate swap,
 * HTTP/2 by ALPN, the TLS version and cipher floor, and mutual TLS (VERIFY_AND_REJECT refusing at
 * the handshake, VERIFY_AND_FORWARD passing the verdict to the origin, revocation by CRL).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import type http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import { after, before, describe, it } from 'node:test';
import net from 'node:net';
import tls, { type TLSSocket } from 'node:tls';
import { Agent } from 'undici';
import { HttpProxy } from './http-proxy.ts';
import type { ResolvedHttpProxy } from './types.ts';
import { request } from '../../../test/support/http-client.ts';
import { rapidReset } from '../../../test/support/rapid-reset.ts';
import { TestCa, tempDir, writePemFile, type IssuedCertificate } from '../../../test/support/pki.ts';
import {
  FRONT_IP,
  freePort,
  resolvedProxy,
  startOrigin,
  testDeps,
  type EchoReply,
  type TestOrigin,
} from '../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };

function run(command: string, args: string[], input = ''): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(command, args, { timeout: 10_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
    child.stdin?.end(input);
  });
}

describe('HTTP proxy, TLS front end', () => {
  const tmp = tempDir('tls');
  let serverCa: TestCa;
  let clientCa: TestCa;
  let rogueCa: TestCa;
  let leaf: IssuedCertificate;
  let renewed: IssuedCertificate;
  let alice: IssuedCertificate;
  let mallory: IssuedCertificate;
  let stranger: IssuedCertificate;
  let crl: string;
  /** Files for curl and openssl s_client. */
  let serverCaFile: string;
  let malloryCertificateFile: string;
  let malloryKeyFile: string;
  let origin: TestOrigin;
  const proxies: HttpProxy[] = [];
  const deps = testDeps();

  async function startProxy(
    extra: Partial<ResolvedHttpProxy>,
    proxyDeps = deps,
  ): Promise<{ proxy: HttpProxy; url: string; config: ResolvedHttpProxy }> {
    const port = await freePort(FRONT_IP);
    const config = resolvedProxy(port, [origin], {
      frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem },
      ...extra,
    });
    const proxy = new HttpProxy(config, proxyDeps);
    await proxy.start();
    proxies.push(proxy);
    return { proxy, url: `https://${FRONT_IP}:${port}`, config };
  }

  before(async () => {
    serverCa = await TestCa.create('Server CA');
    clientCa = await TestCa.create('Client CA');
    rogueCa = await TestCa.create('Rogue CA');
    leaf = await serverCa.issue({ commonName: 'proxy.test', dnsNames: ['proxy.test'], ipAddresses: [FRONT_IP] });
    renewed = await serverCa.issue({ commonName: 'proxy.test renewed', dnsNames: ['proxy.test'], ipAddresses: [FRONT_IP] });
    alice = await clientCa.issue({ commonName: 'alice, "the admin"', organization: 'TPS tests', client: true });
    mallory = await clientCa.issue({ commonName: 'mallory', client: true });
    clientCa.revoke(mallory.serialNumber);
    crl = await clientCa.crlPem();
    stranger = await rogueCa.issue({ commonName: 'stranger', client: true });
    serverCaFile = writePemFile(tmp.dir, 'server-ca.pem', serverCa.certificatePem);
    malloryCertificateFile = writePemFile(tmp.dir, 'mallory.pem', mallory.certificatePem);
    malloryKeyFile = writePemFile(tmp.dir, 'mallory.key', mallory.privateKeyPem);
    origin = await startOrigin();
  });

  after(async () => {
    await Promise.all(proxies.map((p) => p.stop()));
    await origin.close();
    tmp.remove();
  });

  it('serves the configured certificate and tells the origin the scheme was https', T, async () => {
    const { url } = await startProxy({});
    const res = await request(`${url}/secure`, { ca: serverCa.certificatePem });
    assert.equal(res.status, 200);
    assert.equal(res.serverCertificate, leaf.fingerprintHex);
    assert.equal((JSON.parse(res.text) as EchoReply).headers['x-forwarded-proto'], 'https');
  });

  it('serves a replaced certificate to new connections at once, while an open connection keeps working', T, async () => {
    const { proxy, url, config } = await startProxy({});
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: serverCa.certificatePem, maxCachedSessions: 0 });
    const viaAgent = () =>
      new Promise<{ status: number; fingerprint: string; localPort: number }>((resolve, reject) => {
        https
          .get(`${url}/`, { agent }, (res) => {
            const socket = res.socket as TLSSocket;
            const fingerprint = socket.getPeerCertificate().fingerprint256.replaceAll(':', '').toLowerCase();
            res.resume();
            res.on('end', () => resolve({ status: res.statusCode ?? 0, fingerprint, localPort: socket.localPort ?? 0 }));
          })
          .on('error', reject);
      });
    try {
      const before = await viaAgent();
      assert.equal(before.fingerprint, leaf.fingerprintHex);
      await proxy.update({
        ...config,
        revision: config.revision + 1,
        frontendCertificate: { certificatePem: renewed.certificatePem, privateKeyPem: renewed.privateKeyPem },
      });
      const fresh = await request(`${url}/`, { ca: serverCa.certificatePem });
      assert.equal(fresh.serverCertificate, renewed.fingerprintHex, 'a new connection gets the new certificate');
      const kept = await viaAgent();
      assert.equal(kept.localPort, before.localPort, 'the open connection was not closed');
      assert.equal(kept.status, 200);
    } finally {
      agent.destroy();
    }
  });

  it('speaks HTTP/2 to clients that offer it by ALPN (and HTTP/1.1 to the origin)', T, async () => {
    const { url } = await startProxy({});
    const session = http2.connect(url, { ca: serverCa.certificatePem });
    try {
      const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({ ':path': '/h2?x=1', ':method': 'GET', cookie: 'a=1' });
        stream.end();
        let status = 0;
        let body = '';
        stream.on('response', (headers) => (status = Number(headers[':status'])));
        stream.setEncoding('utf8');
        stream.on('data', (d: string) => (body += d));
        stream.on('end', () => resolve({ status, body }));
        stream.on('error', reject);
      });
      assert.equal((session.socket as TLSSocket).alpnProtocol, 'h2');
      assert.equal(status, 200);
      const echo = JSON.parse(body) as EchoReply;
      assert.equal(echo.url, '/h2?x=1');
      assert.equal(echo.headers.host, new URL(url).host, ':authority becomes Host');
      assert.equal(echo.headers['x-forwarded-proto'], 'https');
      assert.equal(echo.headers.cookie, 'a=1');
      assert.equal(echo.headers['transfer-encoding'], undefined, 'a GET without body is sent without one');
    } finally {
      session.close();
    }
    // curl negotiates h2 by itself: the version it reports is the proof.
    const curl = await run('curl', [
      '-s',
      '-o',
      '/dev/null',
      '-w',
      '%{http_version} %{http_code}',
      '--http2',
      '--cacert',
      serverCaFile,
      `${url}/curl`,
    ]);
    assert.equal(curl.stdout, '2 200');
    const curl1 = await run('curl', [
      '-s',
      '-o',
      '/dev/null',
      '-w',
      '%{http_version} %{http_code}',
      '--http1.1',
      '--cacert',
      serverCaFile,
      `${url}/curl`,
    ]);
    assert.equal(curl1.stdout, '1.1 200');
  });

  it('posts a body over HTTP/2', T, async () => {
    const { url } = await startProxy({});
    const session = http2.connect(url, { ca: serverCa.certificatePem });
    try {
      const body = await new Promise<string>((resolve, reject) => {
        const stream = session.request({ ':path': '/upload', ':method': 'POST' });
        stream.end('x'.repeat(100_000));
        let text = '';
        stream.setEncoding('utf8');
        stream.on('data', (d: string) => (text += d));
        stream.on('end', () => resolve(text));
        stream.on('error', reject);
      });
      assert.equal((JSON.parse(body) as EchoReply).bodyLength, 100_000);
    } finally {
      session.close();
    }
  });

  it('refuses TLS 1.1 and weak TLS 1.2 ciphers (openssl s_client)', T, async () => {
    const { url } = await startProxy({});
    const target = new URL(url).host;
    const tls11 = await run('openssl', ['s_client', '-connect', target, '-tls1_1', '-cipher', 'DEFAULT@SECLEVEL=0'], 'Q\n');
    assert.notEqual(tls11.code, 0, 'TLS 1.1 handshake must fail');
    const cbc = await run('openssl', ['s_client', '-connect', target, '-tls1_2', '-cipher', 'ECDHE-ECDSA-AES128-SHA:AES128-SHA'], 'Q\n');
    assert.notEqual(cbc.code, 0, 'CBC suites must not be offered');
    const good = await run('openssl', ['s_client', '-connect', target, '-tls1_2', '-CAfile', serverCaFile], 'Q\n');
    assert.equal(good.code, 0);
    assert.match(good.stdout, /Cipher is ECDHE-ECDSA-(AES\d+-GCM-SHA\d+|CHACHA20-POLY1305)/);
  });

  describe('mutual TLS, VERIFY_AND_REJECT with CRL', () => {
    let url = '';
    before(async () => {
      ({ url } = await startProxy({
        clientVerification: { mode: 'VERIFY_AND_REJECT', caPems: [clientCa.certificatePem], verifyCrl: true, crlPems: [crl] },
      }));
    });

    it('accepts a client certificate issued by the configured CA', T, async () => {
      const res = await request(`${url}/`, { ca: serverCa.certificatePem, cert: alice.certificatePem, key: alice.privateKeyPem });
      assert.equal(res.status, 200);
      const echo = JSON.parse(res.text) as EchoReply;
      assert.equal(echo.headers['x-client-cert-verified'], undefined, 'headers are for VERIFY_AND_FORWARD only');
    });

    it('refuses the TLS handshake without a client certificate (no HTTP response at all)', T, async () => {
      const before = origin.requests;
      await assert.rejects(request(`${url}/`, { ca: serverCa.certificatePem }));
      const curl = await run('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code}', '--cacert', serverCaFile, `${url}/`]);
      assert.notEqual(curl.code, 0);
      assert.equal(curl.stdout, '000', 'no HTTP status line');
      // With TLS 1.2 the refusal happens inside the handshake itself: the server's alert ends it.
      const tls12 = await run('openssl', ['s_client', '-connect', new URL(url).host, '-tls1_2', '-CAfile', serverCaFile], 'Q\n');
      assert.notEqual(tls12.code, 0);
      assert.match(tls12.stderr, /alert handshake failure|certificate required/i);
      assert.equal(origin.requests, before, 'nothing reached the origin');
    });

    it('refuses a revoked client certificate (CRL): the connection ends without any HTTP response', T, async () => {
      const before = origin.requests;
      await assert.rejects(request(`${url}/`, { ca: serverCa.certificatePem, cert: mallory.certificatePem, key: mallory.privateKeyPem }));
      // Node checks the chain verdict right after the handshake and closes the connection: curl sees
      // no status line at all (exit code 56, or 35 when the close races the handshake).
      const curl = await run('curl', [
        '-sS',
        '-o',
        '/dev/null',
        '-w',
        '%{http_code}',
        '--cacert',
        serverCaFile,
        '--cert',
        malloryCertificateFile,
        '--key',
        malloryKeyFile,
        `${url}/`,
      ]);
      assert.notEqual(curl.code, 0);
      assert.equal(curl.stdout, '000');
      assert.equal(origin.requests, before, 'nothing reached the origin');
    });

    it('refuses a client certificate from another CA', T, async () => {
      await assert.rejects(request(`${url}/`, { ca: serverCa.certificatePem, cert: stranger.certificatePem, key: stranger.privateKeyPem }));
    });
  });

  describe('mutual TLS, VERIFY_AND_FORWARD', () => {
    let url = '';
    before(async () => {
      ({ url } = await startProxy({
        clientVerification: { mode: 'VERIFY_AND_FORWARD', caPems: [clientCa.certificatePem], verifyCrl: true, crlPems: [crl] },
      }));
    });

    const seen = async (client: IssuedCertificate | undefined, headers: http.OutgoingHttpHeaders = {}) => {
      const res = await request(`${url}/`, {
        ca: serverCa.certificatePem,
        headers,
        ...(client ? { cert: client.certificatePem, key: client.privateKeyPem } : {}),
      });
      assert.equal(res.status, 200);
      return (JSON.parse(res.text) as EchoReply).headers;
    };

    it('passes SUCCESS, the subject and the fingerprint of a valid certificate', T, async () => {
      const headers = await seen(alice);
      assert.equal(headers['x-client-cert-verified'], 'SUCCESS');
      // RFC 4514 order: the most specific RDN first.
      assert.equal(headers['x-client-cert-subject'], 'CN=alice\\, \\"the admin\\",O=TPS tests');
      assert.equal(headers['x-client-cert-fingerprint'], alice.fingerprintHex);
    });

    it('passes NONE without a certificate, and replaces forged headers', T, async () => {
      const headers = await seen(undefined, {
        'x-client-cert-verified': 'SUCCESS',
        'x-client-cert-subject': 'CN=admin',
        'x-client-cert-fingerprint': 'ab',
      });
      assert.equal(headers['x-client-cert-verified'], 'NONE');
      assert.equal(headers['x-client-cert-subject'], undefined);
      assert.equal(headers['x-client-cert-fingerprint'], undefined);
    });

    it('passes FAILED with the reason for a revoked or untrusted certificate', T, async () => {
      assert.equal((await seen(mallory))['x-client-cert-verified'], 'FAILED:CERT_REVOKED');
      assert.match(
        String((await seen(stranger))['x-client-cert-verified']),
        /^FAILED:(UNABLE_TO_GET_ISSUER_CERT|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|UNABLE_TO_VERIFY_LEAF_SIGNATURE)$/,
      );
    });
  });

  it('with verifyCrl and no CRL fetched yet, refuses every client certificate (fail closed)', T, async () => {
    const { url } = await startProxy({
      clientVerification: { mode: 'VERIFY_AND_REJECT', caPems: [clientCa.certificatePem], verifyCrl: true, crlPems: [] },
    });
    await assert.rejects(
      request(`${url}/`, { ca: serverCa.certificatePem, cert: mallory.certificatePem, key: mallory.privateKeyPem }),
      'the revoked one',
    );
    await assert.rejects(
      request(`${url}/`, { ca: serverCa.certificatePem, cert: alice.certificatePem, key: alice.privateKeyPem }),
      'and the good one: revocation cannot be checked',
    );
    const forwarding = await startProxy({
      clientVerification: { mode: 'VERIFY_AND_FORWARD', caPems: [clientCa.certificatePem], verifyCrl: true, crlPems: [] },
    });
    const res = await request(`${forwarding.url}/`, { ca: serverCa.certificatePem, cert: alice.certificatePem, key: alice.privateKeyPem });
    assert.equal((JSON.parse(res.text) as EchoReply).headers['x-client-cert-verified'], 'FAILED:UNABLE_TO_GET_CRL');
  });

  it('turns on VERIFY_AND_REJECT live: connections opened before get 403, new ones need a certificate', T, async () => {
    const { proxy, url, config } = await startProxy({});
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: serverCa.certificatePem });
    const viaAgent = () =>
      new Promise<number>((resolve, reject) => {
        https
          .get(`${url}/`, { agent }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          })
          .on('error', reject);
      });
    try {
      assert.equal(await viaAgent(), 200);
      await proxy.update({
        ...config,
        revision: config.revision + 1,
        clientVerification: { mode: 'VERIFY_AND_REJECT', caPems: [clientCa.certificatePem], verifyCrl: false, crlPems: [] },
      });
      assert.equal(await viaAgent(), 403);
      await assert.rejects(request(`${url}/`, { ca: serverCa.certificatePem }));
      assert.equal(
        (await request(`${url}/`, { ca: serverCa.certificatePem, cert: alice.certificatePem, key: alice.privateKeyPem })).status,
        200,
      );
    } finally {
      agent.destroy();
    }
  });

  it('drops a slow client over TLS too: one that never handshakes, and one that trickles its headers', T, async () => {
    const { url } = await startProxy(
      {},
      testDeps({ limits: { tlsHandshakeTimeoutMs: 500, headersTimeoutMs: 1000, connectionsCheckingIntervalMs: 200 } }),
    );
    const { hostname, port } = new URL(url);
    const silent = net.connect({ host: hostname, port: Number(port) });
    silent.on('error', () => {});
    await new Promise<void>((resolve) => silent.on('close', () => resolve()));

    const slow = tls.connect({ host: hostname, port: Number(port), ca: serverCa.certificatePem, ALPNProtocols: ['http/1.1'] });
    slow.on('error', () => {});
    await new Promise<void>((resolve) => slow.once('secureConnect', () => resolve()));
    const trickle = `GET / HTTP/1.1\r\nHost: slow\r\nX-Slow: ${'a'.repeat(1000)}`;
    let i = 0;
    const timer = setInterval(() => {
      if (!slow.destroyed && i < trickle.length) slow.write(trickle[i++]!);
    }, 200);
    try {
      await new Promise<void>((resolve) => slow.on('close', () => resolve()));
      assert.ok(i < trickle.length, 'closed before the client finished its headers');
    } finally {
      clearInterval(timer);
    }
  });

  it('proxies a WebSocket over the TLS front end (wss)', T, async () => {
    const wsOrigin = await startOrigin({ websocket: true });
    const port = await freePort(FRONT_IP);
    const proxy = new HttpProxy(
      resolvedProxy(port, [wsOrigin], { frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem } }),
      deps,
    );
    await proxy.start();
    const dispatcher = new Agent({ connect: { ca: serverCa.certificatePem } });
    try {
      // undici's WebSocket takes a dispatcher (a Node extension of the WHATWG constructor) for the custom CA.
      const WebSocketWithOptions = WebSocket as unknown as new (url: string, options: { dispatcher: Agent }) => WebSocket;
      const ws = new WebSocketWithOptions(`wss://${FRONT_IP}:${port}/secure-chat`, { dispatcher });
      const echoed = await new Promise<string>((resolve, reject) => {
        ws.onopen = () => ws.send('over tls');
        ws.onmessage = (event) => {
          resolve(String(event.data));
          ws.close();
        };
        ws.onerror = () => reject(new Error('websocket error'));
      });
      assert.equal(echoed, 'over tls');
    } finally {
      await dispatcher.close();
      await proxy.stop();
      await wsOrigin.close();
    }
  });
});

describe('HTTP proxy, HTTP/2 bounds', () => {
  const tmp = tempDir('h2-bounds');
  let ca: TestCa;
  let leaf: IssuedCertificate;
  let origin: TestOrigin;
  const proxies: HttpProxy[] = [];

  before(async () => {
    ca = await TestCa.create('H2 CA');
    leaf = await ca.issue({ commonName: 'proxy.test', dnsNames: ['proxy.test'], ipAddresses: [FRONT_IP] });
    origin = await startOrigin();
  });
  after(async () => {
    await Promise.all(proxies.map((p) => p.stop()));
    await origin.close();
    tmp.remove();
  });

  async function start(limits: Parameters<typeof testDeps>[0] = {}): Promise<{ url: string; refused: string[] }> {
    const port = await freePort(FRONT_IP);
    const refused: string[] = [];
    const proxy = new HttpProxy(
      resolvedProxy(port, [origin], { frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem } }),
      testDeps({ metrics: { connectionRefused: (_proxy, protocol, reason) => refused.push(`${protocol} ${reason}`) }, ...limits }),
    );
    await proxy.start();
    proxies.push(proxy);
    return { url: `https://${FRONT_IP}:${port}`, refused };
  }

  const get = (session: http2.ClientHttp2Session, path = '/') =>
    new Promise<number>((resolve, reject) => {
      const stream = session.request({ ':path': path });
      stream.on('response', (headers) => {
        stream.resume();
        stream.on('end', () => resolve(Number(headers[':status'])));
      });
      stream.on('error', reject);
      stream.end();
    });

  it('ends a session whose client opens and resets streams (rapid reset), and serves others meanwhile', T, async () => {
    const { url, refused } = await start();
    const { hostname, port } = new URL(url);
    const attack = await rapidReset({ host: hostname, port: Number(port), ca: ca.certificatePem, streams: 10_000 });
    assert.equal(attack.closed, true, 'the session was ended');
    // The GOAWAY may be overtaken by the reset of a close with the client's frames unread.
    assert.ok(
      attack.goawayCode === undefined || attack.goawayCode === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM,
      String(attack.goawayCode),
    );
    assert.ok(refused.includes('HTTP/2 RAPID_RESET'), JSON.stringify(refused));
    const other = http2.connect(url, { ca: ca.certificatePem });
    try {
      assert.equal(await get(other), 200, 'another client is served');
    } finally {
      other.close();
    }
  });

  it('answers 408 to a request whose body does not arrive in time, and ends a session that opens no stream', T, async () => {
    const { url, refused } = await start({ limits: { requestTimeoutMs: 600, headersTimeoutMs: 600, connectionsCheckingIntervalMs: 100 } });
    const session = http2.connect(url, { ca: ca.certificatePem });
    session.on('error', () => {});
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const stream = session.request({ ':path': '/slow-upload', ':method': 'POST' });
        stream.write('a');
        stream.on('response', (headers) => resolve(Number(headers[':status'])));
        stream.on('error', reject);
      });
      assert.equal(status, 408);
      assert.ok(refused.includes('HTTP/2 REQUEST_TIMEOUT'));
      assert.equal(await get(session), 200, 'the session itself goes on');
    } finally {
      session.close();
    }
    const idle = http2.connect(url, { ca: ca.certificatePem });
    idle.on('error', () => {});
    await new Promise<void>((resolve) => idle.once('close', () => resolve()));
    assert.ok(refused.includes('HTTP/2 HEADERS_TIMEOUT'), JSON.stringify(refused));
  });
});
