/**
 * The origin policy at connect time, over real sockets on loopback: names resolved by a DNS server
 * the test controls (test/support/dns-server.ts), literal addresses, TCP, UDP and undici. "Internal"
 * listeners stand for what a tenant must not reach; each counts the connections it sees.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import net from 'node:net';
import http from 'node:http';
import tls from 'node:tls';
import { Pool } from 'undici';
import { TestCa } from '../../test/support/pki.ts';
import { startTestDns, type TestDns } from '../../test/support/dns-server.ts';
import { isOriginRefused, ORIGIN_REFUSED, type OriginRefusal } from './origin-guard.ts';
import { createOriginResolver } from './origin-resolver.ts';
import { recordingOriginGuard } from '../../test/support/origin-guard.ts';

const DNS_IP = '127.0.0.230';
const ALLOWED_IP = '127.0.0.231';
const INTERNAL_IP = '127.0.0.233';

interface CountingServer {
  port: number;
  connections: number;
  close(): Promise<void>;
}

async function countingTcp(host: string): Promise<CountingServer> {
  const state = { connections: 0 };
  const server = net.createServer((socket) => {
    state.connections++;
    socket.end('hello');
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    get connections() {
      return state.connections;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function outcome(socket: net.Socket): Promise<{ data: string; error: NodeJS.ErrnoException | undefined }> {
  return new Promise((resolve) => {
    let data = '';
    let error: NodeJS.ErrnoException | undefined;
    socket.on('data', (chunk: Buffer) => (data += chunk.toString()));
    socket.on('error', (err) => (error = err));
    socket.on('close', () => resolve({ data, error }));
  });
}

describe("origin guard: connections on a tenant's behalf", () => {
  let dns: TestDns;
  let allowed: CountingServer;
  let internal: CountingServer;
  let refusals: OriginRefusal[];
  let guard: ReturnType<typeof recordingOriginGuard>['guard'];

  before(async () => {
    dns = await startTestDns(DNS_IP);
    allowed = await countingTcp(ALLOWED_IP);
    internal = await countingTcp(INTERNAL_IP);
    dns.set('good.test', [ALLOWED_IP]);
    dns.set('evil.test', [INTERNAL_IP]);
    dns.set('metadata.test', ['169.254.169.254']);
    dns.set('mixed.test', [INTERNAL_IP, ALLOWED_IP, 'fd00::1']);
    ({ guard, refusals } = recordingOriginGuard({ allowedNetworks: [`${ALLOWED_IP}/32`] }, createOriginResolver([dns.server])));
  });
  after(async () => {
    await Promise.all([dns.close(), allowed.close(), internal.close()]);
  });

  it("resolves names with the operator's DNS server", async () => {
    const resolver = createOriginResolver([dns.server]);
    assert.deepEqual(await resolver.resolve('good.test', 0), [{ address: ALLOWED_IP, family: 4 }]);
    await assert.rejects(resolver.resolve('nowhere.test', 0), { code: 'ENOTFOUND' });
  });

  it('connects to a name whose address is allowed', async () => {
    const result = await outcome(guard.for('proxy-a').connect({ host: 'good.test', port: allowed.port }));
    assert.equal(result.data, 'hello');
    assert.equal(result.error, undefined);
  });

  it('refuses a name that resolves to a refused address: no connection reaches it, the refusal is reported', async () => {
    const before = internal.connections;
    refusals.length = 0;
    const result = await outcome(guard.for('proxy-a').connect({ host: 'evil.test', port: internal.port }));
    assert.equal(result.error?.code, ORIGIN_REFUSED);
    assert.ok(isOriginRefused(result.error));
    assert.match(
      result.error!.message,
      /evil\.test:\d+ \(127\.0\.0\.233\) refused by the origin policy: 127\.0\.0\.233 is a loopback address/,
    );
    assert.equal(internal.connections, before, 'the internal listener saw nothing');
    assert.deepEqual(refusals, [
      {
        scope: 'proxy-a',
        host: 'evil.test',
        address: INTERNAL_IP,
        port: internal.port,
        reason: 'loopback',
        detail: `${INTERNAL_IP} is a loopback address`,
      },
    ]);

    const metadata = await outcome(guard.for('proxy-a').connect({ host: 'metadata.test', port: 80 }));
    assert.equal((metadata.error as { reason?: string } | undefined)?.reason, 'link-local');
  });

  it('refuses a literal address before any socket connects', async () => {
    const before = internal.connections;
    refusals.length = 0;
    const result = await outcome(guard.for('proxy-b').connect({ host: INTERNAL_IP, port: internal.port }));
    assert.equal(result.error?.code, ORIGIN_REFUSED);
    assert.equal(internal.connections, before);
    assert.equal(refusals.length, 1);
    // A legacy spelling of the same address is the same address.
    const legacy = await outcome(guard.for('proxy-b').connect({ host: '2130706433', port: 80 }));
    assert.equal(legacy.error?.code, ORIGIN_REFUSED);
  });

  it('of a name with allowed and refused addresses, connects to an allowed one only (the answer it checked)', async () => {
    const before = { internal: internal.connections, allowed: allowed.connections };
    for (let i = 0; i < 5; i++) {
      // Same port number on both hosts is not needed: the internal listener would see any attempt on its own port.
      const result = await outcome(guard.for('proxy-c').connect({ host: 'mixed.test', port: allowed.port }));
      assert.equal(result.data, 'hello');
    }
    assert.equal(allowed.connections, before.allowed + 5);
    assert.equal(internal.connections, before.internal);
  });

  it('refuses through TLS connects and undici pools alike', async () => {
    const tlsResult = await outcome(guard.for('proxy-d').connectTls({ host: 'evil.test', port: internal.port, rejectUnauthorized: false }));
    assert.equal(tlsResult.error?.code, ORIGIN_REFUSED);

    const origin = http.createServer((_request, response) => response.end('pooled'));
    await new Promise<void>((resolve) => origin.listen(0, ALLOWED_IP, resolve));
    const originPort = (origin.address() as net.AddressInfo).port;
    try {
      const good = new Pool(`http://good.test:${originPort}`, {
        connect: guard.for('proxy-d').undiciConnector('good.test', originPort, {}),
      });
      const response = await good.request({ path: '/', method: 'GET' });
      assert.equal(await response.body.text(), 'pooled');
      await good.close();

      const before = internal.connections;
      const evil = new Pool(`http://evil.test:${internal.port}`, {
        connect: guard.for('proxy-d').undiciConnector('evil.test', internal.port, {}),
      });
      await assert.rejects(evil.request({ path: '/', method: 'GET' }), { code: ORIGIN_REFUSED });
      await evil.close();
      const literal = new Pool(`http://${INTERNAL_IP}:${internal.port}`, {
        connect: guard.for('proxy-d').undiciConnector(INTERNAL_IP, internal.port, {}),
      });
      await assert.rejects(literal.request({ path: '/', method: 'GET' }), { code: ORIGIN_REFUSED });
      await literal.close();
      assert.equal(internal.connections, before);
    } finally {
      origin.close();
    }
  });

  it('keeps the name for TLS: the certificate is checked against it, the socket goes to the checked address', async () => {
    const ca = await TestCa.create('Guard CA');
    const leaf = await ca.issue({ commonName: 'good.test', dnsNames: ['good.test'] });
    const server = tls.createServer({ cert: leaf.certificatePem, key: leaf.privateKeyPem }, (socket) => socket.end('secure hello'));
    await new Promise<void>((resolve) => server.listen(0, ALLOWED_IP, resolve));
    const port = (server.address() as net.AddressInfo).port;
    dns.set('alias.test', [ALLOWED_IP]);
    try {
      const result = await outcome(guard.for('proxy-f').connectTls({ host: 'good.test', port, ca: ca.certificatePem }));
      assert.equal(result.error, undefined);
      assert.equal(result.data, 'secure hello');
      // Same address, another name: the certificate does not name it.
      const alias = await outcome(guard.for('proxy-f').connectTls({ host: 'alias.test', port, ca: ca.certificatePem }));
      assert.equal(alias.error?.code, 'ERR_TLS_CERT_ALTNAME_INVALID');
    } finally {
      server.close();
    }
  });

  it('refuses a UDP destination resolved to a refused address', async () => {
    const received: Buffer[] = [];
    const target = dgram.createSocket('udp4');
    target.on('message', (message) => received.push(message));
    await new Promise<void>((resolve) => target.bind(0, INTERNAL_IP, resolve));
    const port = target.address().port;
    const lookup = guard.for('proxy-e').udpLookup('evil.test', port) as dgram.SocketOptions['lookup'];
    const sender = dgram.createSocket({ type: 'udp4', lookup });
    const error = await new Promise<Error | undefined>((resolve) => sender.connect(port, 'evil.test', (err?: Error) => resolve(err)));
    assert.equal((error as NodeJS.ErrnoException | undefined)?.code, ORIGIN_REFUSED);
    sender.close();
    target.close();
    assert.deepEqual(received, []);
  });
});
