/**
 * The hand-written origin client against a raw TCP origin that writes exact bytes: response framing
 * (length, chunked, until close, bodiless), interim responses, keep-alive reuse only when the
 * response ended cleanly, refusal of malformed responses, timeouts, pausing, and queueing.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, describe, it } from 'node:test';
import { BAD_RESPONSE, HEADERS_TIMEOUT, OriginClient, type OriginClientOptions, type OriginHandler } from './origin-client.ts';
import { ORIGIN_IP, freePort } from '../../../../test/support/http-servers.ts';
import { permissiveOriginGuard } from '../../../../test/support/origin-guard.ts';

const T = { timeout: 10_000 };

interface Outcome {
  status: number;
  headers: string[];
  body: string;
  error?: string;
}

/** An origin that calls `answer` for every request head it reads; counts connections. */
async function rawOrigin(answer: (socket: net.Socket, head: string, index: number) => void | Promise<void>) {
  const state = { connections: 0, requests: 0 };
  const server = net.createServer((socket) => {
    state.connections++;
    let buffer = '';
    socket.on('error', () => {});
    socket.on('data', (d: Buffer) => {
      buffer += d.toString('latin1');
      for (;;) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end === -1) return;
        const head = buffer.slice(0, end);
        buffer = buffer.slice(end + 4);
        void answer(socket, head, state.requests++);
      }
    });
  });
  const port = await freePort(ORIGIN_IP);
  await new Promise<void>((resolve) => server.listen({ host: ORIGIN_IP, port }, resolve));
  return {
    port,
    state,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
      }),
  };
}

function client(port: number, overrides: Partial<OriginClientOptions> = {}): OriginClient {
  return new OriginClient({
    address: ORIGIN_IP,
    port,
    tls: undefined,
    connectTimeoutMs: 2000,
    headersTimeoutMs: 2000,
    bodyTimeoutMs: 2000,
    keepAliveTimeoutMs: 2000,
    maxConnections: 4,
    maxHeaderSize: 16 * 1024,
    onConnectFailure: () => {},
    // The test origin is on loopback.
    guard: permissiveOriginGuard().for('test'),
    ...overrides,
  });
}

function send(c: OriginClient, method = 'GET', path = '/', options: { pauseFirstChunkMs?: number } = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    const outcome: Outcome = { status: 0, headers: [], body: '' };
    let resume: () => void = () => {};
    let paused = false;
    const handler: OriginHandler = {
      onConnect() {},
      onHeaders(status, raw, r) {
        outcome.status = status;
        outcome.headers = raw;
        resume = r;
        return true;
      },
      onData(chunk) {
        outcome.body += chunk.toString('latin1');
        if (options.pauseFirstChunkMs !== undefined && !paused) {
          paused = true;
          setTimeout(() => resume(), options.pauseFirstChunkMs);
          return false;
        }
        return true;
      },
      onComplete: () => resolve(outcome),
      onError: (err) => resolve({ ...outcome, error: (err as { code?: string }).code ?? err.message }),
    };
    c.request(method, path, ['host', 'origin.test'], undefined, handler);
  });
}

const tick = () => new Promise((r) => setImmediate(r));

describe('origin client', () => {
  const cleanups: (() => Promise<void>)[] = [];
  after(async () => {
    for (const cleanup of cleanups) await cleanup();
  });
  async function setup(answer: Parameters<typeof rawOrigin>[0], overrides: Partial<OriginClientOptions> = {}) {
    const origin = await rawOrigin(answer);
    const c = client(origin.port, overrides);
    cleanups.push(async () => {
      await c.close(0);
      await origin.close();
    });
    return { origin, c };
  }

  it('reads a Content-Length body and reuses the connection', T, async () => {
    const { origin, c } = await setup((socket) => void socket.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello'));
    const first = await send(c);
    assert.deepEqual(first, { status: 200, headers: ['Content-Length', '5', 'X-A', '1'], body: 'hello' });
    await tick();
    const second = await send(c);
    assert.equal(second.body, 'hello');
    assert.equal(origin.state.connections, 1);
  });

  it('sends a held body right after the head, with its own Content-Length in place of the given one', T, async () => {
    let bytes = '';
    const server = net.createServer((socket) => {
      socket.on('data', (d: Buffer) => {
        bytes += d.toString('latin1');
        if (bytes.endsWith('a=1&b=2')) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
      });
    });
    const port = await freePort(ORIGIN_IP);
    await new Promise<void>((resolve) => server.listen({ host: ORIGIN_IP, port }, resolve));
    const c = client(port);
    cleanups.push(async () => {
      await c.close(0);
      await new Promise((resolve) => server.close(resolve));
    });
    const outcome = await new Promise<Outcome>((resolve) => {
      const out: Outcome = { status: 0, headers: [], body: '' };
      const handler: OriginHandler = {
        onConnect() {},
        onHeaders: (status) => {
          out.status = status;
          return true;
        },
        onData: (chunk) => {
          out.body += chunk.toString();
          return true;
        },
        onComplete: () => resolve(out),
        onError: (err) => resolve({ ...out, error: err.message }),
      };
      c.request('POST', '/form', ['host', 'origin.test', 'Content-Length', '999'], undefined, handler, Buffer.from('a=1&b=2'));
    });
    assert.deepEqual([outcome.status, outcome.body, outcome.error], [200, 'ok', undefined]);
    assert.equal(bytes, 'POST /form HTTP/1.1\r\nhost: origin.test\r\ncontent-length: 7\r\n\r\na=1&b=2');
  });

  it('decodes a chunked body split at every byte, with extensions and trailers, then reuses the connection', T, async () => {
    const response = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n';
    const { origin, c } = await setup(async (socket) => {
      for (const byte of response) {
        socket.write(byte);
        await new Promise((r) => setImmediate(r));
      }
    });
    const outcome = await send(c);
    assert.equal(outcome.status, 200);
    assert.equal(outcome.body, 'hello world');
    await tick();
    assert.equal((await send(c)).body, 'hello world');
    assert.equal(origin.state.connections, 1);
  });

  it('reads a body without length until the origin closes, and does not reuse that connection', T, async () => {
    const { origin, c } = await setup((socket) => {
      socket.end('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close');
    });
    assert.equal((await send(c)).body, 'until close');
    assert.equal((await send(c)).body, 'until close');
    assert.equal(origin.state.connections, 2);
  });

  it('skips interim 1xx responses', T, async () => {
    const { c } = await setup((socket) => {
      socket.write('HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
    });
    const outcome = await send(c);
    assert.equal(outcome.status, 200);
    assert.equal(outcome.body, 'ok');
  });

  it('expects no body after HEAD, 204 and 304, whatever Content-Length says', T, async () => {
    const { origin, c } = await setup((socket, head) => {
      if (head.startsWith('HEAD')) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n');
      else if (head.includes('/204')) socket.write('HTTP/1.1 204 No Content\r\n\r\n');
      else socket.write('HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n');
    });
    assert.deepEqual(await send(c, 'HEAD'), { status: 200, headers: ['Content-Length', '1000'], body: '' });
    await tick();
    assert.equal((await send(c, 'GET', '/204')).status, 204);
    await tick();
    assert.equal((await send(c, 'GET', '/304')).status, 304);
    assert.equal(origin.state.connections, 1);
  });

  it('does not reuse a connection after extra bytes, Connection: close, or an HTTP/1.0 response', T, async () => {
    const { origin, c } = await setup((socket, _head, index) => {
      if (index === 0) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA');
      else if (index === 1) socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok');
      else if (index === 2) socket.write('HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok');
      else socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
    });
    for (let i = 0; i < 4; i++) {
      assert.equal((await send(c)).body, 'ok');
      await tick();
    }
    assert.equal(origin.state.connections, 4);
  });

  for (const [what, response] of [
    [
      'both Transfer-Encoding and Content-Length',
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
    ],
    ['two different Content-Length values', 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!'],
    ['an obs-folded header', 'HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 0\r\n\r\n'],
    ['a bare LF inside a header', 'HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\nContent-Length: 0\r\n\r\n'],
    ['a bad status line', 'HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n'],
    ['a bad chunk size', 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n'],
  ] as const) {
    it(`refuses a response with ${what}`, T, async () => {
      const { c } = await setup((socket) => void socket.write(response));
      assert.equal((await send(c)).error, BAD_RESPONSE);
    });
  }

  it('fails with a headers timeout when the origin does not answer', T, async () => {
    const { c } = await setup(() => {}, { headersTimeoutMs: 100 });
    assert.equal((await send(c)).error, HEADERS_TIMEOUT);
  });

  it('opens a new connection when the origin closed the idle one', T, async () => {
    const { origin, c } = await setup((socket) => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
      setTimeout(() => socket.end(), 20);
    });
    assert.equal((await send(c)).body, 'ok');
    await new Promise((r) => setTimeout(r, 100));
    assert.equal((await send(c)).body, 'ok');
    assert.equal(origin.state.connections, 2);
  });

  it('pauses and resumes the body on demand', T, async () => {
    const { c } = await setup(async (socket) => {
      socket.write('HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst');
      await new Promise((r) => setTimeout(r, 20));
      socket.write('+rest');
    });
    assert.equal((await send(c, 'GET', '/', { pauseFirstChunkMs: 50 })).body, 'first+rest');
  });

  it('hands on body chunks the handler may keep after later reads, and a head split across reads', T, async () => {
    // Plain TCP connections read into one shared buffer: a kept chunk must not change under the handler.
    const { c } = await setup(async (socket) => {
      for (const part of ['HTTP/1.1 200 OK\r\nContent-', 'Length: 12\r\n\r\naaaa', 'bbbb', 'cccc']) {
        socket.write(part);
        await new Promise((r) => setTimeout(r, 20));
      }
    });
    const kept = await new Promise<Buffer[]>((resolve, reject) => {
      const chunks: Buffer[] = [];
      c.request('GET', '/', ['host', 'origin.test'], undefined, {
        onConnect() {},
        onHeaders: () => true,
        onData: (chunk) => chunks.push(chunk) > 0,
        onComplete: () => resolve(chunks),
        onError: reject,
      });
    });
    assert.equal(Buffer.concat(kept).toString('latin1'), 'aaaabbbbcccc');
    assert.ok(kept.length >= 2, `${kept.length} chunks`);
  });

  it('finds the end of a head at any length up to maxHeaderSize, in one read or split, and refuses a longer one', T, async () => {
    // The head is looked for in the first 2 KiB decoded, then in the Buffer: around that bound and past it.
    const head = (length: number): string => {
      const start = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Fill: ';
      return `${start}${'f'.repeat(length - start.length)}\r\n\r\n`;
    };
    for (const length of [2040, 2042, 2043, 2044, 2045, 2046, 2047, 2048, 5000, 16 * 1024 - 1]) {
      for (const split of [0, 2046, 2047, 2049]) {
        const { c } = await setup(async (socket) => {
          const bytes = `${head(length)}ok`;
          if (split === 0 || split >= bytes.length) return void socket.write(bytes);
          socket.write(bytes.slice(0, split));
          await new Promise((r) => setTimeout(r, 10));
          socket.write(bytes.slice(split));
        });
        const outcome = await send(c);
        assert.equal(outcome.body, 'ok', `head of ${length + 4} bytes, split at ${split}: ${outcome.error}`);
        assert.equal(outcome.headers[3]!.length, length - 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Fill: '.length);
      }
    }
    const { c } = await setup((socket) => void socket.write(`${head(16 * 1024 + 1)}ok`));
    assert.equal((await send(c)).error, BAD_RESPONSE);
  });

  it('queues requests over maxConnections and serves them on the freed connection', T, async () => {
    const { origin, c } = await setup(
      (socket, _head, index) => void setTimeout(() => socket.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${index}`), 20),
      { maxConnections: 1 },
    );
    const [a, b, d] = await Promise.all([send(c), send(c), send(c)]);
    assert.deepEqual([a.body, b.body, d.body], ['0', '1', '2']);
    assert.equal(origin.state.connections, 1);
  });

  it('reports a refused connect as a connect failure', T, async () => {
    const failures: Error[] = [];
    const c = client(await freePort(ORIGIN_IP), { onConnectFailure: (err) => failures.push(err) });
    const outcome = await send(c);
    assert.equal(outcome.error, 'ECONNREFUSED');
    assert.equal(failures.length, 1);
    await c.close(0);
  });
});
