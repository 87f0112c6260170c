/**
 * The HTTP proxy over real sockets, plain HTTP/1.1: what reaches the origin, what comes back, the
 * limits that protect the proxy, and live updates.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { HttpProxy } from './http-proxy.ts';
import { request } from '../../../test/support/http-client.ts';
import { waitFor } from '../../../test/support/wait.ts';
import {
  FRONT_IP,
  ORIGIN_IP,
  freePort,
  resolvedProxy,
  startOrigin,
  testDeps,
  type EchoReply,
  type TestOrigin,
} from '../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };

describe('HTTP proxy, plain HTTP/1.1', () => {
  let origin: TestOrigin;
  let streaming: TestOrigin;
  let proxy: HttpProxy;
  let port: number;
  let base: string;
  const deps = testDeps({ limits: { maxBodySize: 32 * 1024 * 1024 } });

  before(async () => {
    origin = await startOrigin({ websocket: true });
    // Echoes the request body back as it arrives (chunked response, no length known in advance).
    streaming = await startOrigin({
      handler: (req, res) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'x-origin-connection-header': 'kept' });
        req.pipe(res);
      },
    });
    port = await freePort(FRONT_IP);
    base = `http://${FRONT_IP}:${port}`;
    proxy = new HttpProxy(resolvedProxy(port, [origin]), deps);
    await proxy.start();
  });

  after(async () => {
    await proxy.stop();
    await origin.close();
    await streaming.close();
  });

  it('forwards a GET and adds X-Forwarded-For/-Proto/-Host and a generated X-Request-Id', T, async () => {
    const res = await request(`${base}/path/to?q=1`, { headers: { 'x-forwarded-for': '198.51.100.7', 'user-agent': 'spec' } });
    assert.equal(res.status, 200);
    const echo = JSON.parse(res.text) as EchoReply;
    assert.equal(echo.method, 'GET');
    assert.equal(echo.url, '/path/to?q=1');
    assert.equal(echo.headers['x-forwarded-for'], '198.51.100.7, 127.0.0.1', "the client's value, then the socket peer");
    assert.equal(echo.headers['x-forwarded-proto'], 'http');
    assert.equal(echo.headers['x-forwarded-host'], `${FRONT_IP}:${port}`);
    assert.equal(echo.headers.host, `${FRONT_IP}:${port}`, 'Host passes unchanged');
    assert.match(String(echo.headers['x-request-id']), /^[0-9a-f]{32}$/);
    assert.equal(echo.headers['user-agent'], 'spec');
  });

  it('answers CONNECT with 405 (400 when its target is not host:port) and tunnels nothing', T, async () => {
    const ask = (target: string) =>
      new Promise<string>((resolve) => {
        const socket = net.connect({ host: FRONT_IP, port }, () => socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
        let text = '';
        socket.on('data', (chunk) => (text += chunk.toString('latin1')));
        socket.on('close', () => resolve(text.split('\r\n')[0] ?? ''));
      });
    assert.equal(await ask('example.com:443'), 'HTTP/1.1 405 Method Not Allowed');
    assert.equal(await ask('example.com'), 'HTTP/1.1 400 Bad Request');
  });

  it('gives an HTTP/1.0 request without Host one for the origin (curl --http1.0)', T, async () => {
    const { execFile } = await import('node:child_process');
    // Asynchronously: the proxy under test runs in this very process.
    const out = await new Promise<string>((resolve, reject) =>
      execFile('curl', ['-s', '--max-time', '5', '--http1.0', '-H', 'Host:', `${base}/old`], (err, stdout) =>
        err ? reject(err) : resolve(stdout),
      ),
    );
    const echo = JSON.parse(out) as EchoReply;
    assert.equal(echo.headers.host, `${ORIGIN_IP}:${origin.port}`);
    assert.equal(echo.headers['x-forwarded-host'], undefined);
  });

  it("keeps the client's X-Request-Id", T, async () => {
    const res = await request(`${base}/`, { headers: { 'x-request-id': 'abc-123' } });
    assert.equal((JSON.parse(res.text) as EchoReply).headers['x-request-id'], 'abc-123');
  });

  it('drops hop-by-hop headers (and those Connection names) and forged client-certificate headers', T, async () => {
    const res = await request(`${base}/`, {
      headers: {
        connection: 'keep-alive, x-hop',
        'x-hop': 'secret',
        'keep-alive': 'timeout=5',
        te: 'trailers',
        'proxy-connection': 'keep-alive',
        'x-client-cert-verified': 'SUCCESS',
        'x-client-cert-subject': 'CN=admin',
        'x-end-to-end': 'kept',
      },
    });
    const echo = JSON.parse(res.text) as EchoReply;
    for (const name of ['x-hop', 'keep-alive', 'te', 'proxy-connection', 'x-client-cert-verified', 'x-client-cert-subject']) {
      assert.equal(echo.headers[name], undefined, `${name} must not reach the origin`);
    }
    assert.equal(echo.headers['x-end-to-end'], 'kept');
  });

  it('forwards a POST body with its length, and a chunked body', T, async () => {
    const body = 'a=1&b=2';
    const posted = JSON.parse(
      (await request(`${base}/form`, { method: 'POST', body, headers: { 'content-type': 'application/x-www-form-urlencoded' } })).text,
    ) as EchoReply;
    assert.equal(posted.method, 'POST');
    assert.equal(posted.bodyLength, body.length);
    assert.equal(posted.headers['content-length'], String(body.length));
    const chunked = JSON.parse(
      (await request(`${base}/chunked`, { method: 'PUT', body: Readable.from([Buffer.from('hello '), Buffer.from('world')]) })).text,
    ) as EchoReply;
    assert.equal(chunked.headers['transfer-encoding'], 'chunked');
    assert.equal(chunked.bodyLength, 11);
    assert.equal(chunked.bodySha256, createHash('sha256').update('hello world').digest('hex'));
  });

  it('streams 20 MB both ways (request chunked, response chunked)', { timeout: 60_000 }, async () => {
    const port2 = await freePort(FRONT_IP);
    const echoProxy = new HttpProxy(resolvedProxy(port2, [streaming]), deps);
    await echoProxy.start();
    try {
      const chunk = Buffer.alloc(64 * 1024);
      const sent = createHash('sha256');
      let produced = 0;
      const upload = new Readable({
        read() {
          if (produced >= 20 * 1024 * 1024) return void this.push(null);
          chunk.writeUInt32BE(produced, 0);
          sent.update(chunk);
          produced += chunk.length;
          this.push(Buffer.from(chunk));
        },
      });
      const received = createHash('sha256');
      let length = 0;
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(`http://${FRONT_IP}:${port2}/echo`, { method: 'POST', agent: false }, (res) => {
          res.on('data', (c: Buffer) => {
            received.update(c);
            length += c.length;
          });
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', reject);
        });
        req.on('error', reject);
        upload.pipe(req);
      });
      assert.equal(status, 200);
      assert.equal(length, 20 * 1024 * 1024);
      assert.equal(received.digest('hex'), sent.digest('hex'));
    } finally {
      await echoProxy.stop();
    }
  });

  it('proxies a WebSocket upgrade as a byte pipe (echo through the proxy)', T, async () => {
    const ws = new WebSocket(`ws://${FRONT_IP}:${port}/chat`);
    const messages: string[] = [];
    await new Promise<void>((resolve, reject) => {
      ws.onopen = () => ws.send('hello through the proxy');
      ws.onmessage = (event) => {
        messages.push(String(event.data));
        ws.close();
      };
      ws.onclose = () => resolve();
      ws.onerror = () => reject(new Error('websocket error'));
    });
    assert.deepEqual(messages, ['hello through the proxy']);
  });

  it('answers 413 to a declared body over the limit, and to a chunked one that grows over it', T, async () => {
    const port2 = await freePort(FRONT_IP);
    const small = new HttpProxy(resolvedProxy(port2, [origin]), testDeps({ limits: { maxBodySize: 1024 } }));
    await small.start();
    try {
      const declared = await request(`http://${FRONT_IP}:${port2}/`, { method: 'POST', body: Buffer.alloc(2048) });
      assert.equal(declared.status, 413);
      assert.match(declared.text, /Support ID: <code>[0-9a-f]{32}<\/code>/);
      const chunked = await request(`http://${FRONT_IP}:${port2}/`, {
        method: 'POST',
        body: Readable.from([Buffer.alloc(1000), Buffer.alloc(1000)]),
      });
      assert.equal(chunked.status, 413);
    } finally {
      await small.stop();
    }
  });

  it('drops a slowloris client that sends its headers one byte at a time', T, async () => {
    const port2 = await freePort(FRONT_IP);
    const strict = new HttpProxy(
      resolvedProxy(port2, [origin]),
      testDeps({ limits: { headersTimeoutMs: 1000, connectionsCheckingIntervalMs: 200 } }),
    );
    await strict.start();
    const socket = net.connect({ host: FRONT_IP, port: port2 });
    let timer: NodeJS.Timeout | undefined;
    try {
      const received: Buffer[] = [];
      socket.on('data', (d: Buffer) => received.push(d));
      const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      socket.on('error', () => {});
      await new Promise<void>((resolve) => socket.once('connect', resolve));
      const trickle = `GET / HTTP/1.1\r\nHost: slow\r\nX-Slow: ${'a'.repeat(1000)}`;
      let i = 0;
      timer = setInterval(() => {
        if (!socket.destroyed && i < trickle.length) socket.write(trickle[i++]!);
      }, 250);
      await closed;
      assert.ok(i < trickle.length, 'closed before the client finished its headers');
      assert.match(Buffer.concat(received).toString(), /^HTTP\/1\.1 408/);
    } finally {
      clearInterval(timer);
      socket.destroy();
      await strict.stop();
    }
  });

  it('applies an update to the next request on a kept-alive connection, without closing it', T, async () => {
    const port2 = await freePort(FRONT_IP);
    const config = resolvedProxy(port2, [origin]);
    const live = new HttpProxy(config, deps);
    await live.start();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress: '127.0.0.20' });
    const get = () =>
      new Promise<{ status: number; localPort: number }>((resolve, reject) => {
        const req = http.get(`http://${FRONT_IP}:${port2}/`, { agent }, (res) => {
          const localPort = res.socket.localPort ?? 0;
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, localPort }));
        });
        req.on('error', reject);
      });
    try {
      const first = await get();
      assert.equal(first.status, 200);
      // 127.0.0.20 is in DE by the test overrides.
      await live.update({
        ...config,
        revision: config.revision + 1,
        attributes: { ...config.attributes, geoFencing: { mode: 'BLOCK_LISTED', countries: ['DE'] } },
      });
      const second = await get();
      assert.equal(second.status, 403);
      assert.equal(second.localPort, first.localPort, 'same connection');
    } finally {
      agent.destroy();
      await live.stop();
    }
  });

  it('rejects start with the bind error code when the port is taken', T, async () => {
    const blocker = net.createServer();
    const taken = await freePort(FRONT_IP);
    await new Promise<void>((resolve) => blocker.listen({ host: FRONT_IP, port: taken }, resolve));
    try {
      const clash = new HttpProxy(resolvedProxy(taken, [origin]), deps);
      await assert.rejects(clash.start(), { code: 'EADDRINUSE' });
      await clash.stop();
    } finally {
      blocker.close();
    }
  });

  it('listens on IPv6 too when the front end has an ipv6 address', T, async () => {
    const port2 = await freePort('::1');
    const dual = new HttpProxy(
      resolvedProxy(port2, [origin], { attributes: { frontend: { ipv4: FRONT_IP, ipv6: '::1', port: port2 } } }),
      deps,
    );
    try {
      await dual.start();
      const res = await request(`http://[::1]:${port2}/v6`);
      const echo = JSON.parse(res.text) as EchoReply;
      assert.equal(echo.headers['x-forwarded-for'], '::1');
      assert.equal((await request(`http://${FRONT_IP}:${port2}/v4`)).status, 200);
    } finally {
      await dual.stop();
    }
  });

  it('lets two instances share the address and port with reusePort (one per worker thread)', T, async () => {
    const shared = await freePort(FRONT_IP);
    const first = new HttpProxy(resolvedProxy(shared, [origin]), testDeps({ reusePort: true }));
    const second = new HttpProxy(resolvedProxy(shared, [origin]), testDeps({ reusePort: true }));
    try {
      await first.start();
      await second.start();
      assert.equal((await request(`http://${FRONT_IP}:${shared}/`)).status, 200);
      await first.stop();
      assert.equal((await request(`http://${FRONT_IP}:${shared}/`)).status, 200, 'the other instance still serves');
    } finally {
      await first.stop();
      await second.stop();
    }
  });

  it('caps connections per source and in total before parsing a byte, counting and logging each refusal', T, async () => {
    const capPort = await freePort(FRONT_IP);
    const refused: string[] = [];
    const warnings: string[] = [];
    const capped = new HttpProxy(
      resolvedProxy(capPort, [origin], { attributes: { connectionLimits: { maxConnectionsPerSource: 2, maxConnections: 3 } } }),
      testDeps({
        metrics: { connectionRefused: (_proxy, protocol, reason) => refused.push(`${protocol} ${reason}`) },
        logger: { info() {}, warn: (_details, message) => warnings.push(message), error() {} },
      }),
    );
    await capped.start();
    const held: net.Socket[] = [];
    /** A request on a new connection from `localAddress`: the connection is kept open when served. */
    const attempt = (localAddress: string) =>
      new Promise<'served' | 'refused'>((resolve) => {
        const socket = net.connect({ host: FRONT_IP, port: capPort, localAddress }, () =>
          socket.write('GET / HTTP/1.1\r\nHost: cap\r\n\r\n'),
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
      assert.equal(await attempt('127.0.1.10'), 'served');
      assert.equal(await attempt('127.0.1.10'), 'served');
      assert.equal(await attempt('127.0.1.10'), 'refused', 'a third connection from one source');
      assert.equal(await attempt('127.0.1.11'), 'served');
      assert.equal(await attempt('127.0.1.12'), 'refused', 'a fourth connection to the proxy');
      held.shift()!.destroy();
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(await attempt('127.0.1.12'), 'served', 'a closed connection frees its place');
      assert.deepEqual(refused, ['HTTP SOURCE_CONNECTIONS', 'HTTP GLOBAL_CONNECTIONS']);
      assert.equal(warnings.length, 2);
      // A live update lowers the caps for the next connections.
      await capped.update(resolvedProxy(capPort, [origin], { attributes: { connectionLimits: { maxConnectionsPerSource: 1 } } }));
      assert.equal(await attempt('127.0.1.11'), 'refused', 'the source already holds one');
    } finally {
      for (const socket of held) socket.destroy();
      await capped.stop();
    }
  });

  it("refuses connections past the node's budget, shared with another proxy, before its own caps", T, async () => {
    const { NodeConnectionBudget } = await import('../shared-counters/node-connection-budget.ts');
    const buffer = NodeConnectionBudget.allocate(2, 1);
    const nodeBudget = new NodeConnectionBudget(buffer, 0);
    const refused: string[] = [];
    const deps = testDeps({
      nodeBudget,
      metrics: { connectionRefused: (_proxy, protocol, reason) => refused.push(`${protocol} ${reason}`) },
    });
    const ports = [await freePort(FRONT_IP), await freePort(FRONT_IP)];
    const proxies = ports.map((port) => new HttpProxy(resolvedProxy(port, [origin]), deps));
    const held: net.Socket[] = [];
    const attempt = (port: number) =>
      new Promise<'served' | 'refused'>((resolve) => {
        const socket = net.connect({ host: FRONT_IP, port }, () => socket.write('GET / HTTP/1.1\r\nHost: budget\r\n\r\n'));
        socket.on('data', (chunk: Buffer) => {
          if (!chunk.toString('latin1').startsWith('HTTP/1.1 200')) return;
          held.push(socket);
          resolve('served');
        });
        socket.on('error', () => {});
        socket.on('close', () => resolve('refused'));
      });
    try {
      for (const proxy of proxies) await proxy.start();
      assert.equal(await attempt(ports[0]!), 'served');
      assert.equal(await attempt(ports[1]!), 'served');
      assert.equal(await attempt(ports[0]!), 'refused', 'the node holds its budget of two');
      assert.deepEqual(refused, ['HTTP NODE_BUDGET']);
      held.shift()!.destroy();
      await waitFor('the place given back', async () => NodeConnectionBudget.read(buffer).open === 1);
      assert.equal(await attempt(ports[1]!), 'served', 'a closed connection gives its place back');
    } finally {
      for (const socket of held) socket.destroy();
      for (const proxy of proxies) await proxy.stop();
    }
    await waitFor('every place given back', async () => NodeConnectionBudget.read(buffer).open === 0);
  });

  it(
    'counts the clients of a trusted load balancer by its PROXY header, and its own header-less connections towards the total only',
    T,
    async () => {
      const { ClientAddressPolicy } = await import('../../net/client-address.ts');
      const { encodeProxyV1 } = await import('../../net/proxy-protocol.ts');
      const capPort = await freePort(FRONT_IP);
      const capped = new HttpProxy(
        resolvedProxy(capPort, [origin], { attributes: { connectionLimits: { maxConnectionsPerSource: 1, maxConnections: 100 } } }),
        testDeps({ clientAddress: new ClientAddressPolicy({ trustedProxies: ['127.0.1.13/32'], listenerProxyProtocol: 'optional' }) }),
      );
      await capped.start();
      const held: net.Socket[] = [];
      const attempt = (prefix: string) =>
        new Promise<'served' | 'refused'>((resolve) => {
          const socket = net.connect({ host: FRONT_IP, port: capPort, localAddress: '127.0.1.13' }, () =>
            socket.write(`${prefix}GET / HTTP/1.1\r\nHost: lb\r\n\r\n`),
          );
          socket.on('data', (chunk: Buffer) => {
            if (!chunk.toString('latin1').startsWith('HTTP/1.1 200')) return;
            held.push(socket);
            resolve('served');
          });
          socket.on('error', () => {});
          socket.on('close', () => resolve('refused'));
        });
      const header = (client: string) =>
        encodeProxyV1({ sourceAddress: client, sourcePort: 4000, destinationAddress: FRONT_IP, destinationPort: capPort }).toString(
          'latin1',
        );
      try {
        assert.equal(await attempt(''), 'served');
        assert.equal(await attempt(''), 'served', 'the load balancer itself is not one source');
        assert.equal(await attempt(header('198.51.100.1')), 'served');
        assert.equal(await attempt(header('198.51.100.1')), 'refused', 'the client its header names is');
        assert.equal(await attempt(header('198.51.100.2')), 'served');
      } finally {
        for (const socket of held) socket.destroy();
        await capped.stop();
      }
    },
  );
});
