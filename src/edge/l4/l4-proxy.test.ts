/**
 * The layer 4 proxy over real sockets on loopback: clients, proxy and origins on 127.0.0.x
 * (and ::1), each test with its own proxy, origins and ports, all closed at the end.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { createSocket } from 'node:dgram';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClientAddressPolicy } from '../../net/client-address.ts';
import { L4Counters, L4Proxy, type L4ProxyOptions } from './l4-proxy.ts';
import { permissiveOriginGuard, recordingOriginGuard } from '../../../test/support/origin-guard.ts';
import { encodeProxyV1, encodeProxyV2 } from '../../net/proxy-protocol.ts';
import { ThreatFeed } from './threat-feed.ts';
import { tcpHandlesEnabled, useTcpHandles } from './tcp-sides.ts';
import type { L4AccessLogEntry } from './types.ts';
import {
  connectTo,
  connectionOutcome,
  eventually,
  freePort,
  l4Attributes,
  readBytes,
  readToEnd,
  sha256,
  startEchoOrigin,
  startUdpEchoOrigin,
  udpExchange,
  waitForClose,
  type TcpOrigin,
} from '../../../test/support/l4.ts';

const FRONT = '127.0.0.2';
const noThreats = ThreatFeed.fromEntries([]);

/** Resources a test opened, closed in reverse order after it, whether it passed, failed or timed out. */
class Cleanup {
  private readonly steps: Array<() => unknown> = [];
  add<T>(resource: T, close: (resource: T) => unknown): T {
    this.steps.push(() => close(resource));
    return resource;
  }
  async run(): Promise<void> {
    for (const step of this.steps.reverse()) await step();
    this.steps.length = 0;
  }
}

/** A test with its own cleanup, bounded in time. */
function test(name: string, body: (cleanup: Cleanup) => Promise<void>): void {
  it(name, { timeout: 20_000 }, async (t) => {
    const cleanup = new Cleanup();
    t.after(() => cleanup.run());
    await body(cleanup);
  });
}

async function origin(cleanup: Cleanup, address = '127.0.0.3', options: { expectProxyHeader?: boolean } = {}): Promise<TcpOrigin> {
  return cleanup.add(await startEchoOrigin(address, options), (o) => o.close());
}

/** The test origins are on loopback, which the product's origin policy refuses by default. */
const originGuard = permissiveOriginGuard();

async function proxy(
  cleanup: Cleanup,
  options: Omit<L4ProxyOptions, 'id' | 'threatFeed' | 'originGuard'> & {
    threatFeed?: ThreatFeed;
    originGuard?: L4ProxyOptions['originGuard'];
  },
): Promise<L4Proxy> {
  const created = new L4Proxy({ id: 'test-proxy', threatFeed: noThreats, originGuard, ...options });
  await created.start();
  return cleanup.add(created, (p) => p.stop());
}

function client(cleanup: Cleanup, socket: Socket): Socket {
  return cleanup.add(socket, (s) => s.destroy());
}

/** Writes `data` in chunks, honouring backpressure, then ends the socket. */
async function writeAll(socket: Socket, data: Buffer, chunk = 256 * 1024): Promise<void> {
  for (let offset = 0; offset < data.length; offset += chunk) {
    if (!socket.write(data.subarray(offset, offset + chunk))) await new Promise((resolve) => socket.once('drain', resolve));
  }
  socket.end();
}

// Each TCP behaviour on both paths: bare handles (where this Node has the internals) and the public API.
for (const handles of [true, false]) {
  describe(handles ? 'L4Proxy over TCP' : 'L4Proxy over TCP, on the public-API path (the fallback)', () => {
    before(() => useTcpHandles(handles));
    after(() => useTcpHandles(true));

    it('runs on the path it says (this Node has the internals of the fast path)', () => {
      assert.equal(tcpHandlesEnabled(), handles);
    });

    test('relays bytes intact both ways, 50 MB included', async (cleanup) => {
      const echo = await origin(cleanup);
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echo]), metrics });

      const small = client(cleanup, await connectTo(FRONT, port));
      small.write('ping');
      assert.equal((await readBytes(small, 4)).toString(), 'ping');
      small.end();
      await waitForClose(small);

      const payload = randomBytes(50 * 1024 * 1024);
      const big = client(cleanup, await connectTo(FRONT, port));
      const received = readToEnd(big);
      await writeAll(big, payload);
      const echoed = await received;
      assert.equal(echoed.length, payload.length);
      assert.equal(sha256(echoed), sha256(payload));
      await eventually(() => metrics.closed.TCP.COMPLETED === 2, 'both connections counted as completed');
      assert.equal(metrics.bytesFromClients.TCP, payload.length + 4);
      assert.equal(metrics.bytesToClients.TCP, payload.length + 4);
    });

    test('relays a large download intact to a client that reads in fits and starts', async (cleanup) => {
      // The origin-to-client direction reads into buffers the proxy reuses; a slow reader keeps
      // writes pending, which is when a reused buffer could be overwritten too early.
      const payload = randomBytes(24 * 1024 * 1024);
      const server = createServer((socket) => {
        socket.on('error', () => {});
        socket.end(payload);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.3', resolve));
      cleanup.add(server, (s) => new Promise((resolve) => s.close(resolve)));
      const port = await freePort(FRONT);
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: (server.address() as { port: number }).port }]),
      });
      const socket = client(cleanup, await connectTo(FRONT, port, undefined, { allowHalfOpen: false }));
      const chunks: Buffer[] = [];
      let reads = 0;
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        if (++reads % 16 === 0) {
          socket.pause();
          setTimeout(() => socket.resume(), 2);
        }
      });
      await new Promise((resolve) => socket.once('end', resolve));
      assert.equal(sha256(chunks), sha256(payload));
    });

    test('passes a half-close on in each direction', async (cleanup) => {
      // An origin that answers only after the client finished sending, then keeps reading after
      // its own FIN until the client finishes too.
      let originSaw = '';
      const server = createServer({ allowHalfOpen: true }, (socket) => {
        let request = '';
        socket.on('data', (chunk: Buffer) => (request += chunk.toString()));
        socket.on('end', () => {
          originSaw = request;
          socket.end(`you said ${request}`);
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.3', resolve));
      cleanup.add(server, (s) => new Promise((resolve) => s.close(resolve)));
      const originPort = (server.address() as { port: number }).port;
      const port = await freePort(FRONT);
      await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: originPort }]) });

      // Client -> origin FIN; the origin still answers on its open half.
      const first = client(cleanup, await connectTo(FRONT, port));
      const answer = readToEnd(first);
      first.end('hello');
      assert.equal((await answer).toString(), 'you said hello');
      assert.equal(originSaw, 'hello');

      // Origin -> client FIN first; the client still sends on its open half.
      let readAfterOwnFin: string | undefined;
      const closingServer = createServer({ allowHalfOpen: true }, (socket) => {
        socket.end('bye');
        let rest = '';
        socket.on('data', (chunk: Buffer) => (rest += chunk.toString()));
        socket.on('end', () => (readAfterOwnFin = rest));
      });
      await new Promise<void>((resolve) => closingServer.listen(0, '127.0.0.4', resolve));
      cleanup.add(closingServer, (s) => new Promise((resolve) => s.close(resolve)));
      const closingPort = (closingServer.address() as { port: number }).port;
      const port2 = await freePort(FRONT);
      await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port: port2 }, [{ address: '127.0.0.4', port: closingPort }]) });
      const second = client(cleanup, await connectTo(FRONT, port2));
      assert.equal((await readToEnd(second)).toString(), 'bye');
      second.end('still here');
      await eventually(() => readAfterOwnFin !== undefined, 'origin reads after its own FIN');
      assert.equal(readAfterOwnFin, 'still here');
    });

    test("sends a PROXY v1 header with the client's real address and port", async (cleanup) => {
      const echo = await origin(cleanup, '127.0.0.3', { expectProxyHeader: true });
      const port = await freePort(FRONT);
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [echo], { proxyProtocol: { enabled: true, version: 1 } }),
      });
      const socket = client(cleanup, await connectTo(FRONT, port, '127.0.0.5'));
      socket.write('payload after header');
      assert.equal((await readBytes(socket, 20)).toString(), 'payload after header');
      assert.deepEqual(echo.headers, [
        {
          version: 1,
          command: 'PROXY',
          protocol: 'TCP4',
          sourceAddress: '127.0.0.5',
          sourcePort: socket.localPort,
          destinationAddress: FRONT,
          destinationPort: port,
          length: echo.headers[0]!.length,
        },
      ]);
    });

    test('sends a PROXY v2 header, over IPv4 and IPv6', async (cleanup) => {
      const echo = await origin(cleanup, '127.0.0.3', { expectProxyHeader: true });
      const port = await freePort(FRONT);
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, ipv6: '::1', port }, [echo], { proxyProtocol: { enabled: true, version: 2 } }),
      });
      const overV4 = client(cleanup, await connectTo(FRONT, port, '127.0.0.6'));
      overV4.write('four');
      await readBytes(overV4, 4);
      const overV6 = client(cleanup, await connectTo('::1', port));
      overV6.write('six');
      await readBytes(overV6, 3);
      assert.deepEqual(
        echo.headers.map(({ length: _length, ...header }) => header),
        [
          {
            version: 2,
            command: 'PROXY',
            protocol: 'TCP4',
            sourceAddress: '127.0.0.6',
            sourcePort: overV4.localPort,
            destinationAddress: FRONT,
            destinationPort: port,
          },
          {
            version: 2,
            command: 'PROXY',
            protocol: 'TCP6',
            sourceAddress: '::1',
            sourcePort: overV6.localPort,
            destinationAddress: '::1',
            destinationPort: port,
          },
        ],
      );
    });

    test('holds back a fast sender while the origin does not read (no unbounded buffering)', async (cleanup) => {
      let originSocket: Socket | undefined;
      const received: Buffer[] = [];
      const server = createServer((socket) => {
        originSocket = socket;
        socket.pause(); // a slow origin: reads nothing for now
        socket.on('data', (chunk: Buffer) => received.push(chunk));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.3', resolve));
      cleanup.add(server, (s) => {
        originSocket?.destroy();
        return new Promise((resolve) => s.close(resolve));
      });
      const port = await freePort(FRONT);
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: (server.address() as { port: number }).port }]),
      });
      const socket = client(cleanup, await connectTo(FRONT, port));
      const payload = randomBytes(256 * 1024 * 1024);
      // Push until the proxy stops taking bytes (no drain for 300 ms).
      let offset = 0;
      while (offset < payload.length) {
        const chunk = payload.subarray(offset, offset + 1024 * 1024);
        offset += chunk.length;
        if (!socket.write(chunk)) {
          const drained = await Promise.race([
            new Promise<boolean>((resolve) => socket.once('drain', () => resolve(true))),
            new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 300)),
          ]);
          if (!drained) break;
        }
      }
      // What was taken is bounded by socket buffers (kernel autotuning allows tens of MB on
      // loopback), not by the 256 MB offered.
      assert.ok(offset < 160 * 1024 * 1024, `the proxy took ${offset} bytes from a client whose origin reads nothing`);
      // Once the origin reads, everything sent arrives intact.
      socket.end();
      await eventually(() => originSocket !== undefined);
      const done = new Promise((resolve) => originSocket!.once('end', resolve));
      originSocket!.resume();
      await done;
      assert.equal(sha256(received), sha256(payload.subarray(0, offset)));
    });

    test('holds back a fast origin while the client does not read (no unbounded buffering)', async (cleanup) => {
      const block = Buffer.alloc(1024 * 1024, 'download ');
      let written = 0;
      let stopped!: () => void;
      const originStopped = new Promise<void>((resolve) => {
        stopped = resolve;
      });
      const server = createServer(async (socket) => {
        socket.on('error', () => {});
        // Write until the proxy stops taking bytes (no drain for 300 ms), at most 256 MB.
        while (written < 256 * 1024 * 1024) {
          written += block.length;
          if (!socket.write(block)) {
            const drained = await Promise.race([
              new Promise<boolean>((resolve) => socket.once('drain', () => resolve(true))),
              new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 300)),
            ]);
            if (!drained) break;
          }
        }
        stopped();
        socket.end();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.3', resolve));
      cleanup.add(server, (s) => new Promise((resolve) => s.close(resolve)));
      const port = await freePort(FRONT);
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: (server.address() as { port: number }).port }]),
      });
      const socket = client(cleanup, await connectTo(FRONT, port));
      socket.pause(); // a client that reads nothing for now
      await originStopped;
      // What the origin could write is bounded by socket buffers, not by the 256 MB it had.
      assert.ok(written < 160 * 1024 * 1024, `the proxy took ${written} bytes for a client that reads nothing`);
      // Once the client reads, everything arrives intact.
      let received = 0;
      let intact = true;
      socket.on('data', (chunk: Buffer) => {
        for (let i = 0; i < chunk.length; i += 4099) if (chunk[i] !== block[(received + i) % block.length]) intact = false;
        received += chunk.length;
      });
      const ended = new Promise((resolve) => socket.once('end', resolve));
      socket.resume();
      await ended;
      assert.equal(received, written);
      assert.ok(intact);
    });

    test('spreads long-lived connections evenly across 3 origins with LEAST_CONNECTIONS', async (cleanup) => {
      const origins = [await origin(cleanup, '127.0.0.3'), await origin(cleanup, '127.0.0.4'), await origin(cleanup, '127.0.0.5')];
      const port = await freePort(FRONT);
      const l4 = await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, origins) });
      // Some connections come and go between the long ones: the counts follow.
      const sockets: Socket[] = [];
      // Clients that close when the origin does (no half-open connections left behind).
      const plainClient = async () => client(cleanup, await connectTo(FRONT, port, undefined, { allowHalfOpen: false }));
      for (let i = 0; i < 30; i++) {
        sockets.push(await plainClient());
        if (i % 5 === 0) {
          const shortLived = await connectTo(FRONT, port);
          shortLived.end();
          await waitForClose(shortLived);
        }
      }
      await eventually(() => origins.reduce((sum, o) => sum + o.open, 0) === 30, 'all 30 connections at the origins');
      assert.deepEqual(
        origins.map((o) => o.open),
        [10, 10, 10],
      );
      assert.equal(l4.connections, 30);
      // Closing five at the first origin sends the next five there.
      for (const socket of [...origins[0]!.sockets].slice(0, 5)) socket.destroy();
      await eventually(() => origins[0]!.open === 5 && l4.connections === 25, 'five closed');
      for (let i = 0; i < 5; i++) sockets.push(await plainClient());
      await eventually(() => l4.connections === 30 && origins[0]!.open === 10, 'five more at the first origin');
      assert.deepEqual(
        origins.map((o) => o.open),
        [10, 10, 10],
      );
    });

    test('skips a dead host: the connect is retried on the next host, and the dead one is marked down', async (cleanup) => {
      const live = await origin(cleanup, '127.0.0.4');
      const deadPort = await freePort('127.0.0.3'); // nothing listens there
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: deadPort }, live], {
          backend: { hosts: [{ address: '127.0.0.3', port: deadPort }, live], deliveryMethod: 'ROUND_ROBIN' },
        }),
        metrics,
      });
      for (let i = 0; i < 4; i++) {
        const socket = client(cleanup, await connectTo(FRONT, port));
        socket.write('x');
        assert.equal((await readBytes(socket, 1)).toString(), 'x');
      }
      assert.equal(live.accepted, 4);
      // Round robin would have tried the dead host twice; marked down, it was tried once.
      assert.equal(metrics.originConnectFailures.TCP, 1);
    });

    test('resets the client when no host can be reached', async (cleanup) => {
      const deadPort = await freePort('127.0.0.3');
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: deadPort }]), metrics });
      const socket = client(cleanup, await connectTo(FRONT, port));
      assert.equal(await waitForClose(socket), 'ECONNRESET');
      await eventually(() => metrics.closed.TCP.NO_HOST === 1);
    });

    test('refuses a client listed in the threat feed before the origin sees a connection', async (cleanup) => {
      const dir = cleanup.add(await mkdtemp(join(tmpdir(), 'tps-l4-feed-')), (path) => rm(path, { recursive: true, force: true }));
      const feedFile = join(dir, 'feed.txt');
      await writeFile(feedFile, '# test feed\n127.0.0.9/32 ; listed loopback source\n');
      const feed = new ThreatFeed({ sources: [feedFile], refreshIntervalMs: 0 });
      await feed.start();
      const echo = await origin(cleanup);
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      const l4 = await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echo]), threatFeed: feed, metrics });

      assert.equal(await connectionOutcome(FRONT, port, '127.0.0.9', 'should never arrive'), 'ECONNRESET');
      assert.equal(echo.accepted, 0);
      assert.equal(metrics.refused.TCP.THREAT_FEED, 1);

      const clean = client(cleanup, await connectTo(FRONT, port, '127.0.0.10'));
      clean.write('ok');
      assert.equal((await readBytes(clean, 2)).toString(), 'ok');
      assert.equal(echo.accepted, 1);

      // With threat intelligence off for this proxy, the listed source gets through.
      await l4.update(l4Attributes({ ipv4: FRONT, port }, [echo], { threatIntelligence: { enabled: false } }));
      assert.equal(await connectionOutcome(FRONT, port, '127.0.0.9', 'now ok'), 'ECHO');
    });

    test('caps connections open at once per source', async (cleanup) => {
      const echo = await origin(cleanup);
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      const l4 = await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [echo], {
          connectionLimits: { maxConnectionsPerSource: 2, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 100 },
        }),
        metrics,
      });
      const first = client(cleanup, await connectTo(FRONT, port, '127.0.0.11'));
      client(cleanup, await connectTo(FRONT, port, '127.0.0.11'));
      await eventually(() => echo.open === 2);
      assert.equal(await connectionOutcome(FRONT, port, '127.0.0.11'), 'ECONNRESET');
      assert.equal(metrics.refused.TCP.SOURCE_CONNECTIONS, 1);
      // Another source is not affected; a slot freed is a slot again.
      client(cleanup, await connectTo(FRONT, port, '127.0.0.12'));
      first.destroy();
      await eventually(() => l4.connections === 2, 'first closed, other source open');
      assert.equal(await connectionOutcome(FRONT, port, '127.0.0.11'), 'ECHO');
      assert.equal(echo.accepted, 4);
    });

    test("caps new connections per second per source, and the proxy's total", async (cleanup) => {
      const echo = await origin(cleanup);
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [echo], {
          connectionLimits: { maxConnectionsPerSource: 100, maxNewConnectionsPerSecondPerSource: 3, maxConnections: 5 },
        }),
        metrics,
      });
      // Ten at once from one source: three get through this second.
      const outcomes = await Promise.all(Array.from({ length: 10 }, () => connectionOutcome(FRONT, port, '127.0.0.13')));
      assert.deepEqual(outcomes.filter((o) => o === 'ECHO').length, 3, outcomes.join());
      assert.equal(metrics.refused.TCP.SOURCE_RATE, 7);
      // Five connections held open from two other sources fill the proxy's cap of 5; a sixth is refused.
      for (const source of ['127.0.0.14', '127.0.0.14', '127.0.0.14', '127.0.0.15', '127.0.0.15']) {
        client(cleanup, await connectTo(FRONT, port, source));
      }
      await eventually(() => echo.open === 5);
      assert.equal(await connectionOutcome(FRONT, port, '127.0.0.16'), 'ECONNRESET');
      assert.equal(metrics.refused.TCP.GLOBAL_CONNECTIONS, 1);
    });

    test("refuses connections past the node's budget, shared with another proxy, and gives places back at close", async (cleanup) => {
      const { NodeConnectionBudget } = await import('../shared-counters/node-connection-budget.ts');
      const echo = await origin(cleanup);
      const buffer = NodeConnectionBudget.allocate(2, 1);
      const nodeBudget = new NodeConnectionBudget(buffer, 0);
      const metrics = new L4Counters();
      const ports = [await freePort(FRONT), await freePort(FRONT)];
      for (const port of ports) await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echo]), metrics, nodeBudget });
      const first = client(cleanup, await connectTo(FRONT, ports[0]!, '127.0.0.17'));
      client(cleanup, await connectTo(FRONT, ports[1]!, '127.0.0.18'));
      await eventually(() => echo.open === 2);
      assert.equal(await connectionOutcome(FRONT, ports[0]!, '127.0.0.19'), 'ECONNRESET');
      assert.equal(metrics.refused.TCP.NODE_BUDGET, 1);
      first.destroy();
      await eventually(() => NodeConnectionBudget.read(buffer).open === 1, 'the closed connection gives its place back');
      assert.equal(await connectionOutcome(FRONT, ports[1]!, '127.0.0.19'), 'ECHO');
      await eventually(() => NodeConnectionBudget.read(buffer).open === 1, 'the tunnel that ended gives its place back');
    });

    test('closes a connection idle in both directions', async (cleanup) => {
      const echo = await origin(cleanup);
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echo]), idleTimeoutMs: 200, metrics });
      const socket = client(cleanup, await connectTo(FRONT, port));
      socket.write('x');
      await readBytes(socket, 1);
      await waitForClose(socket);
      await eventually(() => metrics.closed.TCP.IDLE_TIMEOUT === 1 && echo.open === 0);
    });
  });
}

describe('L4Proxy over UDP', () => {
  test('relays datagrams both ways as sessions keyed by client address', async (cleanup) => {
    const echo = cleanup.add(await startUdpEchoOrigin('127.0.0.3'), (o) => o.close());
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    const l4 = await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo], { protocols: ['UDP'] }),
      metrics,
    });
    const payloads = [Buffer.from('one'), Buffer.from('two'), randomBytes(1200)];
    const a = await udpExchange(FRONT, port, payloads, { localAddress: '127.0.0.5' });
    assert.deepEqual(a.replies.map(sha256).sort(), payloads.map(sha256).sort());
    const b = await udpExchange(FRONT, port, [Buffer.from('other client')], { localAddress: '127.0.0.6' });
    assert.equal(b.replies[0]?.toString(), 'other client');
    // Two clients, two sessions, two upstream sockets.
    assert.equal(echo.peers.size, 2);
    assert.equal(l4.connections, 2);
    assert.equal(metrics.accepted.UDP, 2);
  });

  test('prepends a PROXY v2 DGRAM header to every datagram', async (cleanup) => {
    const echo = cleanup.add(await startUdpEchoOrigin('127.0.0.3', { expectProxyHeader: true }), (o) => o.close());
    const port = await freePort(FRONT);
    await proxy(cleanup, {
      // Version 1 configured: UDP still gets version 2, the only one with UDP.
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo], { protocols: ['UDP'], proxyProtocol: { enabled: true, version: 1 } }),
    });
    const { replies, localPort } = await udpExchange(FRONT, port, [Buffer.from('a'), Buffer.from('b'), Buffer.from('c')], {
      localAddress: '127.0.0.7',
    });
    assert.equal(replies.length, 3, 'replies come back without header');
    assert.deepEqual(replies.map(String).sort(), ['a', 'b', 'c']);
    assert.equal(echo.headers.length, 3);
    for (const header of echo.headers) {
      assert.deepEqual(header, {
        version: 2,
        command: 'PROXY',
        protocol: 'UDP4',
        sourceAddress: '127.0.0.7',
        sourcePort: localPort,
        destinationAddress: FRONT,
        destinationPort: port,
        length: 28,
      });
    }
  });

  test('relays an IPv6 client to an IPv4 origin, the PROXY v2 header saying UDP6', async (cleanup) => {
    const echo = cleanup.add(await startUdpEchoOrigin('127.0.0.3', { expectProxyHeader: true }), (o) => o.close());
    const port = await freePort(FRONT);
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv6: '::1', port }, [echo], { protocols: ['UDP'], proxyProtocol: { enabled: true, version: 2 } }),
    });
    const { replies, localPort } = await udpExchange('::1', port, [Buffer.from('six')]);
    assert.equal(replies[0]?.toString(), 'six');
    assert.deepEqual(
      echo.headers.map(({ length: _length, ...header }) => header),
      [
        {
          version: 2,
          command: 'PROXY',
          protocol: 'UDP6',
          sourceAddress: '::1',
          sourcePort: localPort,
          destinationAddress: '::1',
          destinationPort: port,
        },
      ],
    );
  });

  test('ends a session whose host answers with ICMP port unreachable, and marks the host down', async (cleanup) => {
    const live = cleanup.add(await startUdpEchoOrigin('127.0.0.4'), (o) => o.close());
    const dead = { address: '127.0.0.3', port: await freePort('127.0.0.3') }; // nothing listens there
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [dead, live], {
        protocols: ['UDP'],
        backend: { hosts: [dead, live], deliveryMethod: 'ROUND_ROBIN' },
      }),
      metrics,
    });
    // The first session goes to the dead host: its datagram is lost (UDP), the session ends.
    const lost = await udpExchange(FRONT, port, [Buffer.from('lost')], { localAddress: '127.0.0.5', replyTimeoutMs: 300 });
    assert.equal(lost.replies.length, 0);
    await eventually(() => metrics.closed.UDP.ORIGIN_ERROR === 1);
    // Round robin would send every other session to the dead host; marked down, it gets none.
    for (const source of ['127.0.0.5', '127.0.0.6', '127.0.0.7']) {
      const { replies } = await udpExchange(FRONT, port, [Buffer.from(source)], { localAddress: source });
      assert.equal(replies[0]?.toString(), source);
    }
    assert.equal(metrics.originConnectFailures.UDP, 1);
  });

  test('drops datagrams of listed sources, evicts the oldest unconfirmed session for a new one, and expires idle ones', async (cleanup) => {
    const echo = cleanup.add(await startUdpEchoOrigin('127.0.0.3'), (o) => o.close());
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    const l4 = await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo], { protocols: ['UDP'] }),
      threatFeed: ThreatFeed.fromEntries(['127.0.0.9']),
      maxUdpSessions: 2,
      udpSessionIdleMs: 300,
      metrics,
    });
    const listed = await udpExchange(FRONT, port, [Buffer.from('x')], { localAddress: '127.0.0.9', replyTimeoutMs: 300 });
    assert.equal(listed.replies.length, 0);
    assert.equal(echo.received.length, 0);
    assert.equal(metrics.refused.UDP.THREAT_FEED, 1);

    await udpExchange(FRONT, port, [Buffer.from('1')], { localAddress: '127.0.0.5' });
    await udpExchange(FRONT, port, [Buffer.from('2')], { localAddress: '127.0.0.6' });
    // The table is full of sessions whose clients never showed they receive (an echo origin proves
    // nothing): a third client takes the place of the oldest.
    const third = await udpExchange(FRONT, port, [Buffer.from('3')], { localAddress: '127.0.0.7' });
    assert.equal(third.replies[0]?.toString(), '3');
    assert.equal(metrics.udpSessionsEvicted, 1);
    assert.equal(metrics.closed.UDP.EVICTED, 1);
    assert.equal(metrics.refused.UDP.SESSION_LIMIT, undefined);

    await eventually(() => l4.connections === 0, 'idle sessions expired');
    assert.equal(metrics.closed.UDP.IDLE_TIMEOUT, 2);
    const later = await udpExchange(FRONT, port, [Buffer.from('4')], { localAddress: '127.0.0.7' });
    assert.equal(later.replies[0]?.toString(), '4');
  });
});

describe('L4Proxy over UDP: confirmed sessions', () => {
  test('drops a new client only when every session is confirmed and the table is full; never evicts a confirmed one', async (cleanup) => {
    // An origin that answers with a fresh token: a client that sends it back has shown it receives.
    const origin = createSocket('udp4');
    origin.on('message', (message, rinfo) => origin.send(Buffer.concat([randomBytes(16), message]), rinfo.port, rinfo.address));
    await new Promise<void>((resolve) => origin.bind(0, '127.0.0.3', resolve));
    cleanup.add(origin, (socket) => socket.close());
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: origin.address().port }], { protocols: ['UDP'] }),
      maxUdpSessions: 2,
      maxUnconfirmedUdpSessions: 1,
      metrics,
    });
    const confirm = async (localAddress: string) => {
      const client = createSocket('udp4');
      await new Promise<void>((resolve) => client.bind(0, localAddress, resolve));
      cleanup.add(client, (socket) => socket.close());
      const reply = () => new Promise<Buffer>((resolve) => client.once('message', resolve));
      const first = reply();
      // Long enough that the token and its echo fit the reply budget (3x the bytes received).
      client.send(Buffer.from('hello, is anybody there?'), port, FRONT);
      const token = (await first).subarray(0, 16);
      const second = reply();
      client.send(Buffer.concat([token, Buffer.from('again')]), port, FRONT);
      assert.match((await second).toString('latin1'), /again$/);
    };
    await confirm('127.0.0.5');
    await confirm('127.0.0.6');
    const third = await udpExchange(FRONT, port, [Buffer.from('3')], { localAddress: '127.0.0.7', replyTimeoutMs: 300 });
    assert.equal(third.replies.length, 0, 'no place: both sessions are confirmed');
    assert.equal(metrics.refused.UDP.SESSION_LIMIT, 1);
    assert.equal(metrics.udpSessionsEvicted, 0);
  });
});

for (const handles of [true, false]) {
  describe(`L4Proxy and the origin policy${handles ? '' : ', on the public-API path'}`, () => {
    before(() => useTcpHandles(handles));
    after(() => useTcpHandles(true));

    // Origins stored before the operator narrowed the policy: literal addresses are checked again at connect.
    test('resets a TCP client whose only origin the policy refuses; the origin sees nothing, the refusal is reported', async (cleanup) => {
      const echo = await origin(cleanup, '127.0.0.3');
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      const { guard, refusals } = recordingOriginGuard({ allowedNetworks: [] });
      await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echo]), metrics, originGuard: guard });
      // A reset: the connect itself may already see it.
      assert.equal(await connectionOutcome(FRONT, port, '127.0.0.8'), 'ECONNRESET');
      await eventually(() => metrics.closed.TCP.NO_HOST === 1);
      assert.equal(echo.accepted, 0);
      assert.deepEqual(
        refusals.map((r) => [r.scope, r.address, r.reason]),
        [['test-proxy', '127.0.0.3', 'loopback']],
      );
    });

    test('drops the datagrams of a UDP client whose origin the policy refuses', async (cleanup) => {
      const echo = cleanup.add(await startUdpEchoOrigin('127.0.0.3'), (o) => o.close());
      const port = await freePort(FRONT);
      const metrics = new L4Counters();
      const { guard, refusals } = recordingOriginGuard({ allowedNetworks: ['127.0.0.0/8'], ownHosts: ['127.0.0.3'] });
      await proxy(cleanup, {
        attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: echo.address, port: echo.port }], { protocols: ['UDP'] }),
        metrics,
        originGuard: guard,
      });
      const { replies } = await udpExchange(FRONT, port, [Buffer.from('x')], { replyTimeoutMs: 300 });
      assert.deepEqual(replies, []);
      assert.deepEqual(echo.received, []);
      assert.equal(refusals[0]?.reason, 'own-listener');
      assert.equal(metrics.originConnectFailures.UDP, 1);
    });
  });
}

describe('L4Proxy over UDP: the reply budget (anti-amplification)', () => {
  /**
   * An origin that answers each datagram with ten replies of 100 bytes, each starting with 16 fresh
   * random bytes (a token, as QUIC connection IDs or DTLS cookies are), the rest a constant.
   */
  async function amplifyingOrigin(cleanup: Cleanup): Promise<{ port: number; tokens: Buffer[] }> {
    const socket = cleanup.add(createSocket('udp4'), (s) => new Promise<void>((resolve) => s.close(() => resolve())));
    const tokens: Buffer[] = [];
    socket.on('message', (_message, rinfo) => {
      for (let i = 0; i < 10; i++) {
        const token = randomBytes(16);
        tokens.push(token);
        socket.send(Buffer.concat([token, Buffer.alloc(84, 0x61)]), rinfo.port, rinfo.address);
      }
    });
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.3', resolve));
    return { port: socket.address().port, tokens };
  }

  test('sends a client that never shows it receives at most 3x its bytes, drops the rest and counts them', async (cleanup) => {
    const origin = await amplifyingOrigin(cleanup);
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: origin.port }], { protocols: ['UDP'] }),
      metrics,
    });
    const socket = cleanup.add(createSocket('udp4'), (s) => new Promise<void>((resolve) => s.close(() => resolve())));
    const received: Buffer[] = [];
    socket.on('message', (reply) => received.push(reply));
    await new Promise<void>((resolve) => socket.bind(0, '127.0.1.1', resolve));
    // A "spoofed" client: it sends queries, never anything it was sent.
    for (let i = 0; i < 3; i++) socket.send(Buffer.alloc(50, 0x71), port, FRONT);
    await eventually(() => metrics.repliesDropped.UDP + received.length === 30, 'every reply delivered or dropped');
    const bytesIn = 3 * 50;
    const bytesBack = received.reduce((sum, reply) => sum + reply.length, 0);
    assert.ok(bytesBack <= 3 * bytesIn, `${bytesBack} bytes back for ${bytesIn} in`);
    assert.equal(received.length, 4, 'four 100-byte replies fit 450 bytes');
    assert.equal(metrics.repliesDropped.UDP, 26);
  });

  test('lifts the budget once the client echoes bytes of a reply; an echo of its own bytes or of a constant run does not', async (cleanup) => {
    const origin = await amplifyingOrigin(cleanup);
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: origin.port }], { protocols: ['UDP'] }),
      metrics,
    });
    const socket = cleanup.add(createSocket('udp4'), (s) => new Promise<void>((resolve) => s.close(() => resolve())));
    const received: Buffer[] = [];
    socket.on('message', (reply) => received.push(reply));
    await new Promise<void>((resolve) => socket.bind(0, '127.0.1.2', resolve));
    const query = Buffer.concat([randomBytes(16), Buffer.alloc(34, 0x71)]);
    socket.send(query, port, FRONT);
    await eventually(() => metrics.repliesDropped.UDP + received.length === 10, 'the first answers');
    assert.equal(received.length, 1, 'one 100-byte reply fits 150 bytes');
    // Its own bytes and the replies' constant tail prove nothing.
    socket.send(Buffer.concat([query.subarray(0, 16), Buffer.alloc(84, 0x61)]), port, FRONT);
    await eventually(() => metrics.repliesDropped.UDP + received.length === 20, 'the second answers');
    assert.equal(received.length, 4, 'still within 3x: 400 bytes for 150 + 100');
    // The token of a reply it received: it receives what it is sent.
    const token = received.at(-1)!.subarray(0, 16);
    socket.send(Buffer.concat([Buffer.from('ack:'), token]), port, FRONT);
    await eventually(() => received.length === 14, 'every answer to the third query');
    const dropped = metrics.repliesDropped.UDP;
    socket.send(Buffer.from('more'), port, FRONT);
    await eventually(() => received.length === 24, 'every answer from now on');
    assert.equal(metrics.repliesDropped.UDP, dropped);
  });
});

describe('L4Proxy lifecycle', () => {
  let echoA: TcpOrigin;
  let echoB: TcpOrigin;
  const shared = new Cleanup();
  before(async () => {
    echoA = await origin(shared, '127.0.0.3');
    echoB = await origin(shared, '127.0.0.4', { expectProxyHeader: true });
  });
  after(() => shared.run());

  test('update keeps an established connection of an unchanged front end, new connections take the new settings', async (cleanup) => {
    const port = await freePort(FRONT);
    const l4 = await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echoA]) });
    const established = client(cleanup, await connectTo(FRONT, port));
    established.write('before');
    await readBytes(established, 6);

    await l4.update(l4Attributes({ ipv4: FRONT, port }, [echoB], { proxyProtocol: { enabled: true, version: 2 } }));
    established.write('after');
    assert.equal((await readBytes(established, 5)).toString(), 'after', 'the old connection still talks to A');

    const fresh = client(cleanup, await connectTo(FRONT, port, '127.0.0.8'));
    fresh.write('new');
    assert.equal((await readBytes(fresh, 3)).toString(), 'new');
    assert.equal(echoB.headers.at(-1)?.sourceAddress, '127.0.0.8', 'the new connection went to B with a PROXY header');
    assert.equal(l4.connections, 2);
  });

  test('update moves to a new port: the new one is bound, the old one released, established connections stay', async (cleanup) => {
    const oldPort = await freePort(FRONT);
    const newPort = await freePort(FRONT);
    const l4 = await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port: oldPort }, [echoA]) });
    const established = client(cleanup, await connectTo(FRONT, oldPort));

    await l4.update(l4Attributes({ ipv4: FRONT, port: newPort }, [echoA], { protocols: ['TCP', 'UDP'] }));
    await assert.rejects(connectTo(FRONT, oldPort), { code: 'ECONNREFUSED' });
    const moved = client(cleanup, await connectTo(FRONT, newPort));
    moved.write('moved');
    assert.equal((await readBytes(moved, 5)).toString(), 'moved');
    established.write('still');
    assert.equal((await readBytes(established, 5)).toString(), 'still');
  });

  test('update to an address already taken rejects and keeps serving the old configuration', async (cleanup) => {
    const port = await freePort(FRONT);
    const blocker = createServer();
    const takenPort = await freePort(FRONT);
    await new Promise<void>((resolve) => blocker.listen(takenPort, FRONT, resolve));
    cleanup.add(blocker, (s) => new Promise((resolve) => s.close(resolve)));
    const l4 = await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echoA]) });
    await assert.rejects(l4.update(l4Attributes({ ipv4: FRONT, port: takenPort }, [echoB])), { code: 'EADDRINUSE' });
    const socket = client(cleanup, await connectTo(FRONT, port));
    socket.write('same');
    assert.equal((await readBytes(socket, 4)).toString(), 'same');
    assert.equal(echoA.sockets.size > 0, true, 'still proxied to A');
  });

  test('start rejects with the errno and releases what it had bound', async (cleanup) => {
    const port = await freePort(FRONT);
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(port, '::1', resolve));
    cleanup.add(blocker, (s) => new Promise((resolve) => s.close(resolve)));
    const clash = new L4Proxy({
      id: 'clash',
      attributes: l4Attributes({ ipv4: FRONT, ipv6: '::1', port }, [echoA]),
      threatFeed: noThreats,
      originGuard,
    });
    await assert.rejects(clash.start(), { code: 'EADDRINUSE' });
    // The IPv4 listener it had bound first is released again.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(port, FRONT, resolve));
    await new Promise((resolve) => probe.close(resolve));

    // An address this host does not have (TEST-NET-1): nothing is sent, the bind just fails.
    const foreign = new L4Proxy({
      id: 'foreign',
      attributes: l4Attributes({ ipv4: '192.0.2.1', port }, [echoA]),
      threatFeed: noThreats,
      originGuard,
    });
    await assert.rejects(foreign.start(), { code: 'EADDRNOTAVAIL' });
  });

  test('with reusePort, two proxies (one per worker) share the front-end port', async (cleanup) => {
    const port = await freePort(FRONT);
    const attributes = l4Attributes({ ipv4: FRONT, port }, [echoA], { protocols: ['TCP', 'UDP'] });
    await proxy(cleanup, { attributes, reusePort: true });
    await proxy(cleanup, { attributes, reusePort: true });
    assert.equal(await connectionOutcome(FRONT, port, '127.0.0.8'), 'ECHO');
  });

  test('stop frees the port and closes established connections', async (cleanup) => {
    const port = await freePort(FRONT);
    const l4 = new L4Proxy({
      id: 'stopping',
      attributes: l4Attributes({ ipv4: FRONT, port }, [echoA], { protocols: ['TCP', 'UDP'] }),
      threatFeed: noThreats,
      originGuard,
    });
    await l4.start();
    const socket = client(cleanup, await connectTo(FRONT, port));
    socket.write('x');
    await readBytes(socket, 1);
    const closed = waitForClose(socket);
    await l4.stop();
    await closed;
    assert.equal(l4.connections, 0);
    const probe = createServer();
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(port, FRONT, resolve);
    });
    await new Promise((resolve) => probe.close(resolve));
    // The UDP port too.
    const udpProbe = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      udpProbe.once('error', reject);
      udpProbe.bind(port, FRONT, resolve);
    });
    await new Promise<void>((resolve) => udpProbe.close(() => resolve()));
    await assert.rejects(l4.update(l4Attributes({ ipv4: FRONT, port }, [echoA])), /stopped/);
  });
});

describe('L4Proxy behind a load balancer (PROXY protocol from trusted peers)', () => {
  /** The load balancer (trusted) and a client that connects directly (not trusted). */
  const LB = '127.0.0.9';
  const DIRECT = '127.0.0.5';
  const policy = (listenerProxyProtocol: 'optional' | 'required') =>
    new ClientAddressPolicy({ trustedProxies: [`${LB}/32`], listenerProxyProtocol }, { headerTimeoutMs: 2_000 });
  const header = (sourceAddress: string, port: number) =>
    encodeProxyV2({ sourceAddress, sourcePort: 40123, destinationAddress: FRONT, destinationPort: port }, 'TCP');

  test('takes the client from the header: the origin gets it in its own PROXY header, and only the payload', async (cleanup) => {
    const echo = await origin(cleanup, '127.0.0.3', { expectProxyHeader: true });
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo], { proxyProtocol: { enabled: true, version: 1 } }),
      clientAddress: policy('required'),
      metrics,
    });
    const socket = client(cleanup, await connectTo(FRONT, port, LB));
    socket.write(
      Buffer.concat([
        encodeProxyV1({ sourceAddress: '198.51.100.7', sourcePort: 40123, destinationAddress: FRONT, destinationPort: port }),
        Buffer.from('hello'),
      ]),
    );
    socket.write(' world');
    assert.equal((await readBytes(socket, 11)).toString(), 'hello world');
    assert.equal(echo.headers.length, 1);
    assert.equal(echo.headers[0]!.sourceAddress, '198.51.100.7');
    assert.equal(echo.headers[0]!.sourcePort, 40123);
    assert.equal(echo.headers[0]!.destinationAddress, FRONT, 'the edge is the destination, as before');
    socket.end();
    await eventually(() => metrics.closed.TCP.COMPLETED === 1, 'the connection counted');
  });

  test('checks the threat feed and the flood caps against the client in the header, not the load balancer', async (cleanup) => {
    const echo = await origin(cleanup);
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo], {
        connectionLimits: { maxConnectionsPerSource: 1, maxNewConnectionsPerSecondPerSource: 200, maxConnections: 100 },
      }),
      threatFeed: ThreatFeed.fromEntries(['198.51.100.66']),
      clientAddress: policy('required'),
      metrics,
    });
    const through = async (clientIp: string): Promise<Socket> => {
      const socket = client(cleanup, await connectTo(FRONT, port, LB));
      socket.write(Buffer.concat([header(clientIp, port), Buffer.from('ping')]));
      return socket;
    };
    // A listed client behind the load balancer is refused...
    assert.equal(await waitForClose(await through('198.51.100.66')), 'ECONNRESET');
    assert.equal(metrics.refused.TCP.THREAT_FEED, 1);
    // ...while others behind the same load balancer each get their own per-source cap of one.
    const first = await through('198.51.100.1');
    const second = await through('198.51.100.2');
    assert.equal((await readBytes(first, 4)).toString(), 'ping');
    assert.equal((await readBytes(second, 4)).toString(), 'ping');
    assert.equal(await waitForClose(await through('198.51.100.1')), 'ECONNRESET', 'a second connection of one client is over its cap');
    assert.equal(metrics.refused.TCP.SOURCE_CONNECTIONS, 1);
  });

  test('required: a trusted peer without a header is refused; a direct client is never parsed', async (cleanup) => {
    const echo = await origin(cleanup);
    const port = await freePort(FRONT);
    const metrics = new L4Counters();
    await proxy(cleanup, { attributes: l4Attributes({ ipv4: FRONT, port }, [echo]), clientAddress: policy('required'), metrics });
    assert.equal(await connectionOutcome(FRONT, port, LB, 'no header'), 'ECONNRESET');
    assert.equal(metrics.refused.TCP.PROXY_HEADER, 1);
    assert.equal(echo.accepted, 0, 'no origin connection for it');
    assert.equal(await connectionOutcome(FRONT, port, DIRECT, 'no header'), 'ECHO');
    // A direct client's PROXY header is its payload: it reaches the origin as it was sent.
    const spoof = header('198.51.100.7', port).toString('latin1');
    assert.equal(await connectionOutcome(FRONT, port, DIRECT, spoof), 'ECHO');
  });

  test('optional: a trusted peer may connect without a header (the load balancer is then the source)', async (cleanup) => {
    const echo = await origin(cleanup, '127.0.0.3', { expectProxyHeader: true });
    const port = await freePort(FRONT);
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo], { proxyProtocol: { enabled: true, version: 2 } }),
      clientAddress: policy('optional'),
    });
    const socket = client(cleanup, await connectTo(FRONT, port, LB));
    socket.write('plain');
    assert.equal((await readBytes(socket, 5)).toString(), 'plain');
    assert.equal(echo.headers[0]?.sourceAddress, LB);
  });

  test('optional: a silent trusted peer is taken as it is after the header timeout (the origin speaks first)', async (cleanup) => {
    const greeter = createServer((socket) => {
      socket.on('error', () => {});
      socket.write('220 ready\r\n');
      socket.on('data', (chunk: Buffer) => socket.write(`got ${chunk.toString()}`));
    });
    await new Promise<void>((resolve) => greeter.listen(0, '127.0.0.3', resolve));
    cleanup.add(greeter, (s) => new Promise((resolve) => s.close(resolve)));
    const port = await freePort(FRONT);
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [{ address: '127.0.0.3', port: (greeter.address() as { port: number }).port }]),
      clientAddress: new ClientAddressPolicy({ trustedProxies: [LB], listenerProxyProtocol: 'optional' }, { headerTimeoutMs: 100 }),
    });
    const socket = client(cleanup, await connectTo(FRONT, port, LB));
    assert.equal((await readBytes(socket, 11)).toString(), '220 ready\r\n');
    socket.write('quit');
    assert.equal((await readBytes(socket, 8)).toString(), 'got quit');
  });

  test('writes an access-log line per TCP connection, tunnelled or refused, and per UDP session', async (cleanup) => {
    const echo = await origin(cleanup);
    const udpEcho = cleanup.add(await startUdpEchoOrigin('127.0.0.3'), (o) => o.close());
    const port = await freePort(FRONT);
    const lines: L4AccessLogEntry[] = [];
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port }, [echo]),
      threatFeed: ThreatFeed.fromEntries(['127.0.0.9']),
      tenantId: 'tenant-1',
      accessLog: (entry) => lines.push(entry),
    });
    assert.equal(await connectionOutcome(FRONT, port, '127.0.0.9', 'never'), 'ECONNRESET');
    const socket = client(cleanup, await connectTo(FRONT, port, '127.0.0.10'));
    socket.end('hello');
    assert.equal((await readToEnd(socket)).toString(), 'hello');
    await eventually(() => lines.length === 2, 'two lines');
    const [refused, tunnelled] = lines;
    assert.deepEqual(
      { ...refused, time: undefined },
      {
        type: 'l4',
        time: undefined,
        proxyId: 'test-proxy',
        tenantId: 'tenant-1',
        protocol: 'TCP',
        clientIp: '127.0.0.9',
        clientPort: refused!.clientPort,
        serverIp: FRONT,
        serverPort: port,
        durationMs: 0,
        answeredBy: 'threat-feed',
        refused: 'THREAT_FEED',
        bytesIn: 0,
        bytesOut: 0,
      },
    );
    assert.equal(tunnelled!.answeredBy, 'origin');
    assert.equal(tunnelled!.end, 'COMPLETED');
    assert.equal(tunnelled!.clientIp, '127.0.0.10');
    assert.equal(tunnelled!.upstream, `127.0.0.3:${echo.port}`);
    assert.deepEqual([tunnelled!.bytesIn, tunnelled!.bytesOut], [5, 5]);
    assert.ok(tunnelled!.durationMs >= tunnelled!.originMs! && tunnelled!.originMs! >= 0);

    const udpPort = await freePort(FRONT);
    const udpLines: L4AccessLogEntry[] = [];
    await proxy(cleanup, {
      attributes: l4Attributes({ ipv4: FRONT, port: udpPort }, [udpEcho], { protocols: ['UDP'] }),
      udpSessionIdleMs: 200,
      accessLog: (entry) => udpLines.push(entry),
    });
    const { localPort } = await udpExchange(FRONT, udpPort, [Buffer.from('ping')], { localAddress: '127.0.0.5' });
    await eventually(() => udpLines.length === 1, 'the session line');
    const session = udpLines[0]!;
    assert.deepEqual(
      [
        session.protocol,
        session.clientIp,
        session.clientPort,
        session.answeredBy,
        session.end,
        session.bytesIn,
        session.bytesOut,
        session.upstream,
      ],
      ['UDP', '127.0.0.5', localPort, 'origin', 'IDLE_TIMEOUT', 4, 4, `127.0.0.3:${udpEcho.port}`],
    );
  });
});
