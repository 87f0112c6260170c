/**
 * The native refusal engine (refusal-engine.ts, native/refusal-engine/engine.cc) over real sockets:
 * once a blocked source's connection has had a head answered on the JavaScript path, its repeats are
 * answered by the engine (pipelined ones too, past one group), counted in the episode, the metrics
 * and the kernel escalation's input as the JavaScript path counts them; anything else (another head,
 * a client that does not read, the block's end, the client leaving) goes back to the JavaScript path
 * and is answered as it would have been there; random byte streams (copies, near copies, other
 * heads, bodies, garbage, cut anywhere) get the same answers from both paths. The suite fails where
 * the engine is not built: the
 * test setup builds it (scripts/setup.sh), and a missing build must not pass unnoticed.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { AppDdosAttackEvent } from '@tps/model';
import { HttpProxy } from './http-proxy.ts';
import { configureRefusalEngine, refusalEngine, refusalEngineUnavailable } from './refusal-engine.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../test/support/http-servers.ts';
import { get, RawConnection, supportIdOf } from '../../../test/support/raw-http.ts';

const T = { timeout: 30_000 };
const STATUS_LINE = 'HTTP/1.1 429 Too Many Requests\r\n';

/** A small deterministic generator (mulberry32): the same cases on every run. */
function seeded(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('the native refusal engine', () => {
  let origin: TestOrigin;
  let proxy: HttpProxy;
  let port = 0;
  const refused: number[] = [];
  const escalationInput = new Map<string, number>();
  const deps = testDeps({
    rateLimit: { updateIntervalMs: 50 },
    metrics: { requestsRefused: (_proxy, _by, _status, count) => refused.push(count) },
    onBlockedRefusal: (_proxy, source, _until, requests = 1) => escalationInput.set(source, (escalationInput.get(source) ?? 0) + requests),
  });

  before(async () => {
    assert.equal(refusalEngineUnavailable(), undefined, 'the engine is built and loads (bash native/refusal-engine/build.sh)');
    origin = await startOrigin();
    port = await freePort(FRONT_IP);
    proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: { rateLimiting: { thresholds: [{ requests: 2, periodSeconds: 60 }], blockSeconds: 3 } },
      }),
      deps,
    );
    await proxy.start();
  });
  after(async () => {
    await proxy.stop();
    await origin.close();
    assert.equal(refusalEngine()!.stats().connections, 0, 'the proxy stopped: the engine holds no connection');
  });

  /** A connection of `client` whose source is blocked, its head answered once on the JavaScript path. */
  async function blockedConnection(client: string): Promise<{ connection: RawConnection; supportId: string }> {
    const connection = await RawConnection.open(port, client);
    connection.write(get('/1') + get('/2') + get('/3'));
    assert.deepEqual(
      (await connection.read(['GET', 'GET', 'GET'])).map((r) => r.status),
      [200, 200, 429],
    );
    // The first one after the phase's 429 goes through Node's parser, the next through the scan.
    connection.write(get('/again') + get('/again'));
    const answers = await connection.read(['GET', 'GET']);
    const supportId = supportIdOf(answers[1]!.body);
    assert.ok(supportId);
    return { connection, supportId };
  }

  it(
    'answers the repeats of a blocked head, one by one and pipelined, and counts each in the episode, the metrics and the escalation',
    T,
    async () => {
      const client = '127.0.0.61';
      const engine = refusalEngine()!;
      const before = engine.stats().refused;
      const { connection, supportId } = await blockedConnection(client);
      for (let i = 0; i < 20; i++) {
        connection.write(get('/again'));
        const [answer] = await connection.read(['GET']);
        assert.equal(answer!.status, 429);
        assert.equal(answer!.headers.get('connection'), 'keep-alive');
        assert.match(answer!.headers.get('retry-after') ?? '', /^[123]$/);
        assert.equal(supportIdOf(answer!.body), supportId);
      }
      // More than one group of pipelined copies in one write, with empty lines between some.
      connection.write(`${get('/again').repeat(70)}\r\n${get('/again')}`);
      const pipelined = await connection.read(Array.from({ length: 71 }, () => 'GET'));
      assert.ok(pipelined.every((answer) => answer.status === 429 && supportIdOf(answer.body) === supportId));
      assert.ok(engine.stats().refused - before >= 90, `the engine answered the repeats (${engine.stats().refused - before})`);

      // Another head (HEAD): back to the JavaScript path, answered without a body, then the connection goes on there.
      connection.write(get('/again', 'HEAD'));
      const [head] = await connection.read(['HEAD']);
      assert.equal(head!.status, 429);
      assert.equal(head!.body, '');
      connection.write(get('/again'));
      assert.equal((await connection.read(['GET']))[0]!.status, 429);

      // 2 (JavaScript) + 20 + 71 (engine) + HEAD + 1: all in the episode, in the metrics and the escalation's count.
      const events = deps.insight.events.filter((e): e is AppDdosAttackEvent => e.type === 'APP_DDOS_ATTACK' && e.source.ip === client);
      assert.equal(events.length, 1);
      await until(() => deps.insight.updates.filter((u) => u.eventId === events[0]!.id).at(-1)?.update.blockedRequests === 96);
      await until(() => escalationInput.get(client) === 96);
      await until(() => refused.reduce((sum, count) => sum + count, 0) >= 95);
      connection.close();
    },
  );

  it('gives a client that does not read every answer, in order, once it reads', T, async () => {
    const { connection } = await blockedConnection('127.0.0.62');
    connection.close();
    // A raw socket that counts answers without keeping them: thousands of 429s, read only at the end.
    const socket = net.connect({ host: FRONT_IP, port, localAddress: '127.0.0.62' });
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.pause();
    const copies = 20_000;
    socket.write(get('/again') + get('/again'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.write(get('/again').repeat(copies));
    await new Promise((resolve) => setTimeout(resolve, 500));
    let answers = 0;
    let tail = '';
    socket.on('data', (chunk: Buffer) => {
      const text = tail + chunk.toString('latin1');
      answers += text.split(STATUS_LINE).length - 1;
      // Shorter than the status line: a line cut between two reads is counted once.
      tail = text.slice(-(STATUS_LINE.length - 1));
    });
    socket.resume();
    await until(() => answers >= copies + 2);
    assert.equal(answers, copies + 2);
    socket.destroy();
  });

  it('gives the connection back at the end of the block: the last 429 closes it, and the source is served again', T, async () => {
    const client = '127.0.0.63';
    const { connection } = await blockedConnection(client);
    connection.write(get('/again'));
    const [answer] = await connection.read(['GET']);
    await new Promise((resolve) => setTimeout(resolve, Number(answer!.headers.get('retry-after')) * 1000 + 150));
    connection.write(get('/again'));
    const [last] = await connection.read(['GET']);
    assert.equal(last!.status, 429);
    assert.equal(last!.headers.get('connection'), 'close');
    await connection.ended();
    const served = await RawConnection.open(port, client);
    served.write(get('/served'));
    assert.equal((await served.read(['GET']))[0]!.status, 200);
    served.close();
  });

  it('answers random byte streams exactly as the JavaScript path does (differential, fixed seed)', { timeout: 120_000 }, async () => {
    const random = seeded(0x7e57);
    const head = get('/again');
    const pieces: (() => string)[] = [
      () => head,
      () => head,
      () => head.repeat(1 + Math.floor(random() * 80)),
      () => '\r\n',
      () => get('/again', 'HEAD'),
      () => get(`/other${Math.floor(random() * 3)}`),
      () => {
        // One byte of the head changed: a near copy is not a copy.
        const at = Math.floor(random() * (head.length - 4));
        return head.slice(0, at) + String.fromCharCode(33 + Math.floor(random() * 90)) + head.slice(at + 1);
      },
      () => `POST /form HTTP/1.1\r\nHost: site.test\r\nContent-Length: ${head.length}\r\n\r\n${head}`,
      () => 'NOT AN HTTP REQUEST\r\n\r\n',
      () => head.replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n'),
    ];
    const cases = Array.from({ length: 40 }, () => {
      const text = Array.from({ length: 1 + Math.floor(random() * 6) }, () => pieces[Math.floor(random() * pieces.length)]!()).join('');
      // Every case ends with an HTTP/1.0 request: the last answer closes, so the whole stream is read.
      const stream = `${text}GET /again HTTP/1.0\r\nHost: site.test\r\n\r\n`;
      const cuts = [Math.floor(random() * stream.length), Math.floor(random() * stream.length)].sort((x, y) => x - y);
      return [stream.slice(0, cuts[0]), stream.slice(cuts[0], cuts[1]), stream.slice(cuts[1])];
    });
    let source = 0;
    const run = async (writes: string[]): Promise<string> => {
      source++;
      const { connection } = await blockedConnection(`127.0.3.${source}`);
      connection.close();
      const socket = net.connect({ host: FRONT_IP, port, localAddress: `127.0.3.${source}` });
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
      socket.on('error', () => {});
      const closed = new Promise((resolve) => socket.once('close', resolve));
      await new Promise((resolve) => socket.once('connect', resolve));
      // The connection's head answered on the JavaScript path first: the engine takes the rest.
      socket.write(head + head);
      await until(() => received.split(STATUS_LINE).length - 1 === 2);
      for (const write of writes) {
        if (socket.destroyed) break;
        socket.write(write);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      await closed;
      // What each answer was: its status, and whether it kept the connection (the Date and support id aside).
      return [...received.matchAll(/HTTP\/1\.1 (\d{3}) [^\r]*\r\n(?:[^\r]+\r\n)*?connection: ([a-z-]+)/g)]
        .map((m) => `${m[1]} ${m[2]}`)
        .join(',');
    };
    const engine = refusalEngine()!;
    const engineBefore = engine.stats().refused;
    for (const writes of cases) {
      configureRefusalEngine('auto');
      const native = await run(writes);
      configureRefusalEngine('javascript');
      const javascript = await run(writes);
      configureRefusalEngine('auto');
      assert.equal(native, javascript, JSON.stringify(writes));
    }
    assert.ok(engine.stats().refused > engineBefore, 'the engine answered some of them');
  });

  it('forgets a connection its client closed', T, async () => {
    const engine = refusalEngine()!;
    const { connection } = await blockedConnection('127.0.0.64');
    connection.write(get('/again'));
    await connection.read(['GET']);
    const held = engine.stats().connections;
    assert.ok(held >= 1);
    connection.close();
    await until(() => engine.stats().connections === held - 1);
    await until(() => proxy.earlyRefusals.connections === 0);
  });

  it('keeps a connection whose head is long on the JavaScript path (the engine copies each head it serves)', T, async () => {
    const engine = refusalEngine()!;
    const client = '127.0.0.66';
    const { connection } = await blockedConnection(client);
    connection.close();
    const long = `GET /again HTTP/1.1\r\nHost: site.test\r\nCookie: ${'c'.repeat(2048)}\r\n\r\n`;
    const fresh = await RawConnection.open(port, client);
    const held = engine.stats().connections;
    for (let i = 0; i < 5; i++) {
      fresh.write(long);
      assert.equal((await fresh.read(['GET']))[0]!.status, 429);
    }
    assert.equal(engine.stats().connections, held, 'not adopted');
    fresh.close();
  });

  it('releases a connection its proxy closes before its descriptor is closed', T, async () => {
    const engine = refusalEngine()!;
    const client = '127.0.0.65';
    const { connection } = await blockedConnection(client);
    connection.write(get('/again'));
    await connection.read(['GET']);
    const held = engine.stats().connections;
    // As the kernel escalation does: the engine lets go in the same turn, before the handle closes.
    assert.equal(proxy.earlyRefusals.closeConnectionsOf(client), 1);
    assert.equal(engine.stats().connections, held - 1);
    await connection.ended();
  });
});
