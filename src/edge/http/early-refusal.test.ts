/**
 * The early refusal path over real sockets: a blocked source's requests answered 429 with
 * Retry-After without Node's HTTP server or the phases, on a kept-alive connection (pipelined
 * requests included) and on a new one from its first byte; other sources served; the source served
 * again once its block ends; one insight event per episode with every refusal counted in it;
 * refusals counted in the metrics.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { AppDdosAttackEvent } from '@tps/model';
import { EarlyRefusals } from './early-refusal.ts';
import { HttpProxy } from './http-proxy.ts';
import type { RateEpisode, RateLimiter } from './rate-limit/limiter.ts';
import { ClientAddressPolicy } from '../../net/client-address.ts';
import { request } from '../../../test/support/http-client.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../test/support/http-servers.ts';
import { get, RawConnection, supportIdOf } from '../../../test/support/raw-http.ts';
import { TestCa } from '../../../test/support/pki.ts';

const T = { timeout: 20_000 };

describe('early refusal of blocked sources', () => {
  let origin: TestOrigin;
  let proxy: HttpProxy;
  let port = 0;
  const completed: number[] = [];
  const refused: number[] = [];
  const deps = testDeps({
    rateLimit: { updateIntervalMs: 50 },
    metrics: {
      requestCompleted: (_proxy, status) => completed.push(status),
      requestsRefused: (_proxy, answeredBy, status, count) => {
        assert.equal(answeredBy, 'rate-limit');
        assert.equal(status, 429);
        refused.push(count);
      },
    },
  });

  before(async () => {
    origin = await startOrigin();
    port = await freePort(FRONT_IP);
    proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: { rateLimiting: { thresholds: [{ requests: 2, periodSeconds: 60 }], blockSeconds: 2 } },
      }),
      deps,
    );
    await proxy.start();
  });
  after(async () => {
    await proxy.stop();
    await origin.close();
  });

  it('answers every pipelined request of a blocked source 429 with Retry-After, without the phases, then serves it again', T, async () => {
    const client = '127.0.0.41';
    const connection = await RawConnection.open(port, client);
    connection.write(get('/1') + get('/2'));
    assert.deepEqual(
      (await connection.read(['GET', 'GET'])).map((r) => r.status),
      [200, 200],
    );
    const originRequests = origin.requests;
    // The third request crosses the threshold: the rate-limit phase answers it (and the episode starts).
    connection.write(get('/3'));
    const [first] = await connection.read(['GET']);
    assert.equal(first!.status, 429);
    const supportId = supportIdOf(first!.body);
    assert.ok(supportId);
    const phasesBefore = completed.length;

    // The next ones, pipelined in one write (a HEAD among them): one answer each, in order, each with
    // the block's Retry-After and the episode's page, none through Node's server or the phases.
    connection.write(get('/4') + get('/5', 'HEAD') + get('/6') + get('/7') + get('/8'));
    const answers = await connection.read(['GET', 'HEAD', 'GET', 'GET', 'GET']);
    for (const answer of answers) {
      assert.equal(answer.status, 429);
      assert.match(answer.headers.get('retry-after') ?? '', /^[12]$/);
      assert.equal(answer.headers.get('content-type'), 'text/html; charset=utf-8');
      assert.equal(answer.headers.get('connection'), 'keep-alive');
    }
    assert.equal(answers[1]!.body, '', 'no body for HEAD');
    assert.equal(answers[1]!.headers.get('content-length'), answers[0]!.headers.get('content-length'));
    for (const answer of [answers[0]!, ...answers.slice(2)]) assert.equal(supportIdOf(answer.body), supportId);
    assert.equal(completed.length, phasesBefore, 'no request object, no phase, no completion for the refused requests');

    // A new connection of the same source: refused from its first request, at accept.
    const fresh = await request(`http://${FRONT_IP}:${port}/new`, { localAddress: client });
    assert.equal(fresh.status, 429);
    assert.equal(supportIdOf(fresh.text), supportId);
    assert.equal(completed.length, phasesBefore, 'the new connection never reached the HTTP server');

    // Another source is served meanwhile.
    const other = await request(`http://${FRONT_IP}:${port}/other`, { localAddress: '127.0.0.42' });
    assert.equal(other.status, 200, other.text);
    assert.equal(origin.requests, originRequests + 1, 'only the other source reached the origin');

    // Read into the shared buffer (not 'data' events): a Node without the slots it uses fails here.
    assert.ok(proxy.earlyRefusals.sharedReads >= 2, 'both refused connections read into the shared buffer');
    // Answered straight to the handle (not socket.write): a Node without the internals it uses fails here.
    assert.ok(proxy.earlyRefusals.directWrites >= 1, 'the pipelined answers written straight to the handle');

    // The block ends (Retry-After): the next request on the refused connection gets a last 429 that
    // closes it, and the source's next connection is served.
    const retryAfter = Number(answers[4]!.headers.get('retry-after'));
    await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000 + 100));
    connection.write(get('/after'));
    const [lastAnswer] = await connection.read(['GET']);
    assert.equal(lastAnswer!.status, 429);
    assert.equal(lastAnswer!.headers.get('retry-after'), '1');
    assert.equal(lastAnswer!.headers.get('connection'), 'close');
    await connection.ended();
    assert.equal((await request(`http://${FRONT_IP}:${port}/after-new`, { localAddress: client })).status, 200);
    assert.equal(proxy.earlyRefusals.connections, 0);

    // One event for the episode, and every refusal of it counted there (the updates carry the total).
    const events = deps.insight.events.filter((e): e is AppDdosAttackEvent => e.type === 'APP_DDOS_ATTACK' && e.source.ip === client);
    assert.equal(events.length, 1);
    assert.equal(events[0]!.supportId, supportId);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const updates = deps.insight.updates.filter((u) => u.eventId === events[0]!.id);
    assert.equal(updates.at(-1)?.update.blockedRequests, 7, 'the phase refusal, five pipelined ones and the new connection');
  });

  it('answers a blocked request with a body 429 and closes, so the body is never read as requests', T, async () => {
    const client = '127.0.0.43';
    const connection = await RawConnection.open(port, client);
    connection.write(get('/1') + get('/2') + get('/3'));
    assert.deepEqual(
      (await connection.read(['GET', 'GET', 'GET'])).map((r) => r.status),
      [200, 200, 429],
    );
    const smuggled = get('/smuggled');
    connection.write(`POST /form HTTP/1.1\r\nHost: site.test\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`);
    const [answer] = await connection.read(['POST']);
    assert.equal(answer!.status, 429);
    assert.equal(answer!.headers.get('connection'), 'close');
    await connection.ended();

    // On a new connection (refused at accept) too, and a malformed head gets 400 and the end.
    const fresh = await RawConnection.open(port, client);
    fresh.write(
      `POST /form HTTP/1.1\r\nHost: site.test\r\nTransfer-Encoding: chunked\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`,
    );
    const [chunked] = await fresh.read(['POST']);
    assert.equal(chunked!.status, 429);
    await fresh.ended();
    const garbage = await RawConnection.open(port, client);
    garbage.write('NOT AN HTTP REQUEST\r\n\r\n');
    assert.equal((await garbage.read(['GET']))[0]!.status, 400);
    await garbage.ended();
  });

  it("closes a blocked source's refused connections on request, and only that source's", T, async () => {
    const open = async (client: string) => {
      const connection = await RawConnection.open(port, client);
      connection.write(get('/1') + get('/2') + get('/3') + get('/4'));
      assert.deepEqual(
        (await connection.read(['GET', 'GET', 'GET', 'GET'])).map((r) => r.status),
        [200, 200, 429, 429],
      );
      // Those went through the phases (answers in order behind the proxied ones); this one, with
      // nothing under way on the connection, takes it to the early path.
      connection.write(get('/5'));
      assert.equal((await connection.read(['GET']))[0]!.status, 429);
      return connection;
    };
    const first = await open('127.0.0.48');
    const other = await open('127.0.0.49');
    assert.equal(proxy.earlyRefusals.closeConnectionsOf('127.0.0.48'), 1);
    await first.ended();
    other.write(get('/6'));
    assert.equal((await other.read(['GET']))[0]!.status, 429, "the other source's connection is still answered");
    other.close();
  });

  it('counts the early refusals in the metrics as requests answered by the rate limit', T, async () => {
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const total = refused.reduce((sum, n) => sum + n, 0);
    // Seven from the first test (five pipelined, one new connection, the last one after the block),
    // two from the second, five from the third: per connection the fourth pipelined request (the
    // rate-limit phase refused the third and began the block; the front end checks the block before
    // each head, so the fourth goes to the early path) and the fifth, and the one after the close.
    assert.equal(total, 14);
  });
});

describe('early refusal behind a load balancer, and over TLS', () => {
  const LB = '127.0.0.45';
  let origin: TestOrigin;
  const proxies: HttpProxy[] = [];
  const rateLimiting = { thresholds: [{ requests: 2, periodSeconds: 60 }], blockSeconds: 60 };

  before(async () => {
    origin = await startOrigin();
  });
  after(async () => {
    await Promise.all(proxies.map((proxy) => proxy.stop()));
    await origin.close();
  });

  it("leaves a load balancer's connection to the phases when X-Forwarded-For names the client", T, async () => {
    const port = await freePort(FRONT_IP);
    const completed: number[] = [];
    const clientAddress = ClientAddressPolicy.from({ trustedProxies: [`${LB}/32`], listenerProxyProtocol: 'off' });
    const deps = testDeps({
      ...(clientAddress && { clientAddress }),
      metrics: { requestCompleted: (_p, status) => completed.push(status) },
    });
    const proxy = new HttpProxy(resolvedProxy(port, [origin], { attributes: { rateLimiting } }), deps);
    await proxy.start();
    proxies.push(proxy);
    const balancer = await RawConnection.open(port, LB);
    const as = (client: string, path: string) => `GET ${path} HTTP/1.1\r\nHost: site.test\r\nX-Forwarded-For: ${client}\r\n\r\n`;
    balancer.write(as('203.0.113.9', '/1') + as('203.0.113.9', '/2') + as('203.0.113.9', '/3') + as('203.0.113.10', '/other'));
    assert.deepEqual(
      (await balancer.read(['GET', 'GET', 'GET', 'GET'])).map((r) => r.status),
      [200, 200, 429, 200],
      'the blocked client refused, another one behind the same connection served',
    );
    balancer.write(as('203.0.113.9', '/4') + as('203.0.113.11', '/third'));
    assert.deepEqual(
      (await balancer.read(['GET', 'GET'])).map((r) => r.status),
      [429, 200],
    );
    assert.equal(completed.length, 6, 'every request went through the phases');
    balancer.close();
  });

  it('refuses at accept a connection whose PROXY header names a blocked client', T, async () => {
    const port = await freePort(FRONT_IP);
    const completed: number[] = [];
    const clientAddress = ClientAddressPolicy.from(
      { trustedProxies: [`${LB}/32`], listenerProxyProtocol: 'optional' },
      { headerTimeoutMs: 2_000 },
    );
    const deps = testDeps({
      ...(clientAddress && { clientAddress }),
      metrics: { requestCompleted: (_p, status) => completed.push(status) },
    });
    const proxy = new HttpProxy(resolvedProxy(port, [origin], { attributes: { rateLimiting } }), deps);
    await proxy.start();
    proxies.push(proxy);
    const from = async (client: string, requests: number): Promise<number[]> => {
      const connection = await RawConnection.open(port, LB);
      connection.write(`PROXY TCP4 ${client} ${FRONT_IP} 40123 ${port}\r\n${get('/').repeat(requests)}`);
      const statuses = (await connection.read(Array(requests).fill('GET'))).map((r) => r.status);
      connection.close();
      return statuses;
    };
    assert.deepEqual(await from('203.0.113.20', 3), [200, 200, 429]);
    const before = completed.length;
    assert.deepEqual(await from('203.0.113.20', 2), [429, 429], 'refused from the first request');
    assert.equal(completed.length, before, 'without the HTTP server');
    assert.deepEqual(await from('203.0.113.21', 1), [200], 'another client of the same load balancer served');
  });

  it('resets a TLS connection of a blocked source at accept, before any handshake, and counts it', T, async () => {
    const ca = await TestCa.create('Early refusal CA');
    const leaf = await ca.issue({ commonName: 'site.test', dnsNames: ['site.test'], ipAddresses: [FRONT_IP] });
    const port = await freePort(FRONT_IP);
    const refusedConnections: string[] = [];
    const deps = testDeps({ metrics: { connectionRefused: (_p, protocol, reason) => refusedConnections.push(`${protocol} ${reason}`) } });
    const proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: { rateLimiting },
        frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem },
      }),
      deps,
    );
    await proxy.start();
    proxies.push(proxy);
    const url = `https://${FRONT_IP}:${port}/`;
    const client = '127.0.0.46';
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await request(url, { ca: ca.certificatePem, localAddress: client })).status);
    assert.deepEqual(statuses, [200, 200, 429]);
    await assert.rejects(request(url, { ca: ca.certificatePem, localAddress: client }), /ECONNRESET|socket hang up|disconnected/);
    assert.deepEqual(refusedConnections, ['HTTP RATE_LIMITED']);
    assert.equal((await request(url, { ca: ca.certificatePem, localAddress: '127.0.0.47' })).status, 200, 'another source served');
  });
});

describe('early refusal of a client that sends but does not read', () => {
  const episode: RateEpisode = {
    eventId: '00000000-0000-4000-8000-000000000001',
    supportId: '0123456789abcdef0123456789abcdef',
    clientIp: '127.0.0.50',
    threshold: { requests: 1, periodSeconds: 60 },
    observedRequests: 2,
    firstBlockedAt: Date.now(),
    lastBlockedAt: Date.now(),
    blockedRequests: 0,
    blockedUntil: Date.now() + 3_600_000,
    dirty: false,
    held: true,
  };
  const limiter = { refuseBlocked: () => episode } as unknown as RateLimiter;
  const early = new EarlyRefusals({
    limiter: () => limiter,
    location: 'TST',
    maxHeaderSize: 16 * 1024,
    keepAliveTimeoutMs: 60_000,
    headersTimeoutMs: 60_000,
  });
  const accepted: net.Socket[] = [];
  const server = net.createServer((socket) => {
    accepted.push(socket);
    early.takeOver(socket, episode.clientIp, true, Buffer.alloc(0), episode);
  });
  before(() => new Promise<void>((resolve) => server.listen(0, FRONT_IP, resolve)));
  after(async () => {
    early.stop();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('stops reading while its answers wait, then answers every pipelined request in order, the closing one last', T, async () => {
    const { port } = server.address() as net.AddressInfo;
    const client = net.connect({ host: FRONT_IP, port, localAddress: episode.clientIp });
    await new Promise<void>((resolve, reject) => {
      client.once('connect', resolve);
      client.once('error', reject);
    });
    client.pause();
    // About 30 MB of answers for 1 MB of requests: far more than the kernel's buffers hold.
    const request = get('/');
    const requests = Math.ceil((1024 * 1024) / request.length);
    client.write(`${request.repeat(requests - 1)}GET /last HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n`);
    while (accepted.length === 0) await new Promise((resolve) => setImmediate(resolve));
    const handle = (accepted[0] as unknown as { _handle: { reading: boolean; writeQueueSize: number } })._handle;
    // Reading stops once a write waits for the client (polled: the test's timeout is the failure).
    while (handle.reading || handle.writeQueueSize === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    const answered = early.takeRefusedCount();
    assert.ok(answered < requests, `reading stopped before all requests were read (${answered} of ${requests})`);
    // What waits is at most the answers of one read (64 KiB of requests), not the whole flood's.
    const oneAnswer = early.response(episode, Date.now(), false).bytes.length;
    assert.ok(handle.writeQueueSize <= ((64 * 1024) / request.length + 1) * oneAnswer, `${handle.writeQueueSize} bytes queued`);
    assert.ok(early.directWrites > 0, 'written straight to the handle');

    // The client reads: every request answered, in order, the last one closing the connection.
    const statuses = new Map<string, number>();
    let closing = 0;
    let responses = 0;
    let pending: Buffer = Buffer.alloc(0);
    const ended = new Promise<void>((resolve) => client.once('end', resolve));
    client.on('data', (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      for (;;) {
        const end = pending.indexOf('\r\n\r\n');
        if (end === -1) break;
        const head = pending.toString('latin1', 0, end);
        const length = Number(/\r\ncontent-length: (\d+)/.exec(head)?.[1]);
        if (pending.length < end + 4 + length) break;
        pending = pending.subarray(end + 4 + length);
        responses++;
        statuses.set(head.slice(0, 12), (statuses.get(head.slice(0, 12)) ?? 0) + 1);
        if (head.includes('\r\nconnection: close')) closing = responses;
      }
    });
    client.resume();
    await ended;
    assert.equal(responses, requests);
    assert.deepEqual([...statuses], [['HTTP/1.1 429', requests]]);
    assert.equal(closing, requests, 'only the last answer closes');
    assert.equal(pending.length, 0);
    assert.equal(answered + early.takeRefusedCount(), requests);
    client.destroy();
  });
});
