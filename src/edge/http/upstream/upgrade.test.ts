/**
 * Upgrades over real sockets: only a WebSocket handshake becomes a pipe, and only after the origin's
 * 101; an origin that refuses it (and keeps its connection open) has its answer relayed and both
 * connections closed, so a request sent behind the handshake never reaches it; any other Upgrade is
 * a plain request, its Upgrade header not forwarded.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { HttpProxy } from '../http-proxy.ts';
import {
  FRONT_IP,
  ORIGIN_IP,
  freePort,
  resolvedProxy,
  startOrigin,
  testDeps,
  type EchoReply,
  type TestOrigin,
} from '../../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };

/** An origin that reads request heads one after the other on a kept-alive connection and answers each with `status`. */
async function startRawOrigin(status: string): Promise<{ port: number; heads: string[]; close(): Promise<void> }> {
  const heads: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buffer = '';
    socket.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('latin1');
      for (let end = buffer.indexOf('\r\n\r\n'); end !== -1; end = buffer.indexOf('\r\n\r\n')) {
        heads.push(buffer.slice(0, end));
        buffer = buffer.slice(end + 4);
        socket.write(`HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\nContent-Length: 7\r\nConnection: keep-alive\r\n\r\nrefused`);
      }
    });
  });
  const port = await freePort(ORIGIN_IP);
  await new Promise<void>((resolve) => server.listen(port, ORIGIN_IP, resolve));
  return {
    port,
    heads,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Writes `data` on a fresh connection and collects everything until the proxy closes it. */
function exchange(port: number, data: string, after?: { wait: RegExp; send: string }): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: FRONT_IP, port }, () => socket.write(data));
    let received = '';
    let sent = false;
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
      if (after !== undefined && !sent && after.wait.test(received)) {
        sent = true;
        socket.write(after.send);
      }
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(received));
    socket.setTimeout(10_000, () => {
      socket.destroy();
      reject(new Error(`no close; got: ${received}`));
    });
  });
}

const HANDSHAKE =
  'GET /chat HTTP/1.1\r\nHost: shop.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n';
const SMUGGLED = "GET /search?q=1'%20UNION%20SELECT%20password%20FROM%20users-- HTTP/1.1\r\nHost: shop.test\r\n\r\n";

describe('upgrades', () => {
  let refusing: Awaited<ReturnType<typeof startRawOrigin>>;
  let echo: TestOrigin;
  let proxy: HttpProxy;
  let echoProxy: HttpProxy;
  let port = 0;
  let echoPort = 0;

  before(async () => {
    refusing = await startRawOrigin('400 Bad Request');
    echo = await startOrigin({ websocket: true });
    port = await freePort(FRONT_IP);
    proxy = new HttpProxy(resolvedProxy(port, [{ host: ORIGIN_IP, port: refusing.port }]), testDeps());
    await proxy.start();
    echoPort = await freePort(FRONT_IP);
    echoProxy = new HttpProxy(resolvedProxy(echoPort, [echo]), testDeps());
    await echoProxy.start();
  });
  after(async () => {
    await proxy.stop();
    await echoProxy.stop();
    await refusing.close();
    await echo.close();
  });

  it('relays a refused handshake and closes: a request sent behind it in the same packet never reaches the origin', T, async () => {
    const before = refusing.heads.length;
    const received = await exchange(port, HANDSHAKE + SMUGGLED);
    assert.match(received, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(received, /\r\nConnection: close\r\n/i);
    assert.ok(received.endsWith('refused'), 'the body of the refusal is relayed');
    assert.equal(received.match(/HTTP\/1\.1/g)?.length, 1, 'one answer only');
    const heads = refusing.heads.slice(before);
    assert.equal(heads.length, 1);
    assert.match(heads[0]!, /^GET \/chat HTTP\/1\.1/);
    assert.doesNotMatch(heads.join('\n'), /UNION/);
  });

  it('does the same for a request sent once the refusal arrived', T, async () => {
    const before = refusing.heads.length;
    const received = await exchange(port, HANDSHAKE, { wait: /refused$/, send: SMUGGLED });
    assert.match(received, /^HTTP\/1\.1 400 /);
    assert.equal(refusing.heads.length, before + 1);
    assert.doesNotMatch(refusing.heads.join('\n'), /UNION/);
  });

  it('takes any other Upgrade as a plain request, without forwarding the Upgrade header', T, async () => {
    const received = await exchange(
      echoPort,
      'GET /h2c HTTP/1.1\r\nHost: shop.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n',
      { wait: /"origin":"origin"\}$/, send: 'GET /second HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n' },
    );
    const bodies = [...received.matchAll(/\{"method".*?"origin":"origin"\}/g)].map((m) => JSON.parse(m[0]) as EchoReply);
    assert.deepEqual(
      bodies.map((b) => b.url),
      ['/h2c', '/second'],
      'both answered as plain requests on one connection',
    );
    assert.equal(bodies[0]!.headers.upgrade, undefined);
    assert.equal(bodies[0]!.headers['http2-settings'], undefined);
  });

  it('pipes a WebSocket after the origin answers 101 (an echo through the proxy)', T, async () => {
    const frame = Buffer.from([0x81, 0x85, 1, 2, 3, 4, ...Buffer.from('hello').map((b, i) => b ^ [1, 2, 3, 4][i % 4]!)]);
    const socket = net.connect({ host: FRONT_IP, port: echoPort }, () => socket.write(Buffer.concat([Buffer.from(HANDSHAKE), frame])));
    let received = Buffer.alloc(0);
    await new Promise<void>((resolve, reject) => {
      socket.on('data', (chunk: Buffer) => {
        received = Buffer.concat([received, chunk]);
        if (received.includes(Buffer.from('hello'))) resolve();
      });
      socket.on('error', reject);
    });
    socket.destroy();
    assert.match(received.toString('latin1'), /^HTTP\/1\.1 101 Switching Protocols\r\n/);
  });
});
