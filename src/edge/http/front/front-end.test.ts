/**
 * The handle front end against node:http, on real sockets: the same raw bytes sent to the proxy
 * with the front end on and off must get the same bytes back (dates and random ids aside), the
 * same requests at the origin, and the connection closed (or kept) alike. The corpus covers what
 * the front end serves (simple GET and HEAD heads, pipelined) and what it must leave to node:http
 * (bodies, smuggling attempts, upgrades, malformed heads, HTTP/1.0, other methods), alone and after
 * a served request on the same connection.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { HttpProxy } from '../http-proxy.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../../test/support/http-servers.ts';
import { useHandleFrontEnd } from './front-end.ts';

const T = { timeout: 60_000 };
/** A connection the proxy has not closed this long after the last byte is reported (the test fails), not waited on forever. */
const CLOSE_DEADLINE_MS = 8_000;
const CLOSE = 'Connection: close\r\n';
const get = (path: string, extra = ''): string => `GET ${path} HTTP/1.1\r\nHost: shop.example\r\n${extra}\r\n`;

/** Each case's bytes end with a request that asks to close, or with something the proxy refuses and closes on. */
const CORPUS: Record<string, string> = {
  'one GET': get('/a?x=1', CLOSE),
  'three pipelined GETs': get('/1') + get('/2') + get('/3', CLOSE),
  'HEAD then GET': `HEAD /h HTTP/1.1\r\nHost: shop.example\r\n\r\n${get('/g', CLOSE)}`,
  'duplicate and mixed-case headers': get('/d', `X-Dup: 1\r\nx-dup: 2\r\nCookie: a=1\r\nCookie: b=2\r\nACCEPT: */*\r\n${CLOSE}`),
  'a hop-by-hop header listed in Connection': get('/hop', `Connection: x-secret, close\r\nX-Secret: 1\r\nKeep-Alive: 5\r\n`),
  'a client X-Request-Id': get('/rid', `X-Request-Id: client-chosen-id-1\r\n${CLOSE}`),
  'POST with a body after a GET': `${get('/first')}POST /p HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 5\r\n${CLOSE}\r\nhello`,
  'chunked POST': `POST /c HTTP/1.1\r\nHost: shop.example\r\nTransfer-Encoding: chunked\r\n${CLOSE}\r\n5\r\nhello\r\n0\r\n\r\n`,
  'Content-Length and Transfer-Encoding': `POST /s HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${get('/smuggled', CLOSE)}`,
  'two Content-Lengths': `GET /cl HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n`,
  'Content-Length on a GET after a GET': `${get('/ok')}GET /body HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 3\r\n${CLOSE}\r\nabc`,
  'a space before the colon': get('/sp', `Host : other.example\r\n${CLOSE}`),
  'an invalid header name': get('/bad', `Bad(Name): 1\r\n${CLOSE}`),
  'a control character in a value': get('/ctl', `X-Ctl: a\x01b\r\n${CLOSE}`),
  'obs-fold': get('/fold', `X-Fold: a\r\n b\r\n${CLOSE}`),
  'a bare LF': `GET /lf HTTP/1.1\nHost: shop.example\n${CLOSE}\n`,
  'a bare CR': `GET /cr HTTP/1.1\r\nHost: shop.example\rX: 1\r\n${CLOSE}\r\n`,
  'no Host': `GET /nohost HTTP/1.1\r\n${CLOSE}\r\n`,
  'two Hosts': get('/hosts', `Host: other.example\r\n${CLOSE}`),
  'HTTP/1.0': 'GET /old HTTP/1.0\r\nHost: shop.example\r\n\r\n',
  'HTTP/1.0 after a GET': `${get('/new')}GET /old HTTP/1.0\r\nHost: shop.example\r\n\r\n`,
  'HTTP/2 version on HTTP/1': 'GET /v2 HTTP/2.0\r\nHost: shop.example\r\n\r\n',
  'lower-case method': `get /lower HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
  'OPTIONS *': `OPTIONS * HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
  CONNECT: `CONNECT shop.example:443 HTTP/1.1\r\nHost: shop.example:443\r\n\r\n`,
  'absolute-form target': `GET http://shop.example/abs HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
  'a target with a fragment and dot segments': get('/a/../b/./c?q=%2e%2e#frag', CLOSE),
  'a target with a raw non-ASCII byte': `GET /caf\xe9 HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
  'a space in the target': `GET /a b HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
  'Expect: 100-continue without a body': get('/expect', `Expect: 100-continue\r\n${CLOSE}`),
  'a WebSocket upgrade': get(
    '/ws',
    'Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n',
  ),
  'leading empty lines': `\r\n\r\n${get('/after-empty', CLOSE)}`,
  'a head over the size limit': get('/big', `X-Big: ${'a'.repeat(20_000)}\r\n${CLOSE}`),
  garbage: 'HELLO THERE\r\n\r\n',
  'nothing at all (the header timeout)': '',
  'a target the proxy refuses (an encoded NUL)': get('/a%00b', CLOSE),
  'a HEAD the proxy refuses': `HEAD /a%00b HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
  'dot segments above the root': get('/%2e%2e/%2e%2e/etc/passwd', CLOSE),
  'a request line only': 'GET / HTTP/1.1\r\n\r\n',
  // The front end looks for a head's end in its first 2 KiB as text, then in the bytes: around that bound and past it.
  'a head of 3 KiB': get('/long', `X-Fill: ${'a'.repeat(3000)}\r\n${CLOSE}`),
  'a head whose end straddles 2 KiB': filledTo(2046, '/edge'),
  'a head ending at 2 KiB, then another': filledTo(2044, '/at', '') + get('/next', CLOSE),
  // llhttp hands more than 32 fields over in parts (kOnHeaders) before the head is complete.
  'forty fields, twice, pipelined': get('/many1', fields(40)) + get('/many2', `${fields(40)}${CLOSE}`),
  'pipelined heads across 2 KiB': get('/p1', `X-Fill: ${'b'.repeat(1500)}\r\n`) + get('/p2', `X-Fill: ${'c'.repeat(1500)}\r\n${CLOSE}`),
};

function fields(count: number): string {
  let out = '';
  for (let i = 0; i < count; i++) out += `X-Field-${i}: ${i}\r\n`;
  return out;
}

/** A GET whose CRLF CRLF starts at `at`, asking to close unless `close` is ''. */
function filledTo(at: number, path: string, close = CLOSE): string {
  const bare = get(path, `X-Fill: \r\n${close}`);
  return get(path, `X-Fill: ${'f'.repeat(at + 4 - bare.length)}\r\n${close}`);
}

/**
 * node:http parses pipelined heads all at once: a malformed third head makes it answer 400 and
 * close before the answers to the first two (which it had already sent to the origin) go out. The
 * front end answers each head in turn, so the first two get their answers, then the same 400.
 */
const BAD_AFTER_GOOD = `${get('/1')}${get('/2')}GET /3 HTTP/1.1\r\nHost: shop.example\r\nBad Name: x\r\n\r\n`;

interface Outcome {
  response: string;
  closed: boolean;
}

/** Sends `bytes` on a fresh connection and reads until the proxy closes it. */
function exchange(port: number, bytes: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = net.connect({ host: FRONT_IP, port }, () => socket.write(Buffer.from(bytes, 'latin1')));
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ response: Buffer.concat(chunks).toString('latin1'), closed: false });
    }, CLOSE_DEADLINE_MS);
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ response: Buffer.concat(chunks).toString('latin1'), closed: true });
    });
  });
}

/** Dates and the 32-hex ids the proxy makes per request (support ids, X-Request-Id) are not the same twice. */
function normalized(text: string): string {
  return text
    .replace(/^(date: ).*$/gim, '$1<date>')
    .replace(/"date":"[^"]*"/gi, '"date":"<date>"')
    .replace(/[0-9a-f]{32}/g, '<id>');
}

describe('HTTP/1.1 handle front end', () => {
  let origin: TestOrigin;
  let proxy: HttpProxy;
  let port: number;
  /** A proxy whose origin refuses connections: its answers are the upstream's error pages. */
  let deadProxy: HttpProxy;
  let deadPort: number;

  before(async () => {
    // The origin answers with the request as it saw it (raw header order included) and a few headers of its own.
    origin = await startOrigin({
      handler: (req, res) => {
        let length = 0;
        req.on('data', (chunk: Buffer) => {
          length += chunk.length;
        });
        req.on('end', () => {
          const body = JSON.stringify({ method: req.method, url: req.url, rawHeaders: req.rawHeaders, length });
          res.writeHead(200, ['Content-Type', 'application/json', 'Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'X-Origin', 'yes']);
          res.end(req.method === 'HEAD' ? undefined : body);
        });
      },
    });
    port = await freePort(FRONT_IP);
    proxy = new HttpProxy(
      resolvedProxy(port, [origin]),
      testDeps({ limits: { maxHeaderSize: 16 * 1024, keepAliveTimeoutMs: 2_000, headersTimeoutMs: 2_000 } }),
    );
    await proxy.start();
    const closedPort = await freePort(FRONT_IP);
    deadPort = await freePort(FRONT_IP);
    deadProxy = new HttpProxy(
      resolvedProxy(deadPort, [{ host: FRONT_IP, port: closedPort }], { id: '00000000-0000-4000-8000-0000000000d2' }),
      testDeps(),
    );
    await deadProxy.start();
  });

  after(async () => {
    useHandleFrontEnd(true);
    await proxy.stop();
    await deadProxy.stop();
    await origin.close();
  });

  for (const [name, bytes] of Object.entries(CORPUS)) {
    it(`answers as node:http does: ${name}`, T, async () => {
      useHandleFrontEnd(false);
      const byNode = await exchange(port, bytes);
      useHandleFrontEnd(true);
      const byHandles = await exchange(port, bytes);
      assert.equal(byNode.closed, true, 'node:http closed the connection');
      assert.equal(normalized(byHandles.response), normalized(byNode.response));
      assert.equal(byHandles.closed, byNode.closed);
    });
  }

  for (const [name, bytes] of Object.entries({
    'a GET': get('/down', CLOSE),
    'a HEAD': `HEAD /down HTTP/1.1\r\nHost: shop.example\r\n${CLOSE}\r\n`,
    'two pipelined GETs': get('/1') + get('/2', CLOSE),
  })) {
    it(`answers as node:http does when the origin is down: ${name}`, T, async () => {
      useHandleFrontEnd(false);
      const byNode = await exchange(deadPort, bytes);
      useHandleFrontEnd(true);
      const byHandles = await exchange(deadPort, bytes);
      assert.match(byNode.response, /^HTTP\/1\.1 50\d/);
      assert.equal(normalized(byHandles.response), normalized(byNode.response));
      assert.equal(byHandles.closed, byNode.closed);
    });
  }

  it('answers pipelined requests before the malformed one after them, then as node:http does', T, async () => {
    useHandleFrontEnd(false);
    const byNode = await exchange(port, BAD_AFTER_GOOD);
    useHandleFrontEnd(true);
    const byHandles = await exchange(port, BAD_AFTER_GOOD);
    assert.equal(byNode.response, 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    assert.ok(byHandles.response.endsWith(byNode.response));
    assert.deepEqual(
      [...byHandles.response.matchAll(/"url":"([^"]+)"/g)].map((m) => m[1]),
      ['/1', '/2'],
    );
    assert.equal(byHandles.closed, true);
  });

  it('keeps a connection across requests, and closes it when idle past the keep-alive timeout', T, async () => {
    useHandleFrontEnd(true);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<net.Socket>();
    for (let i = 0; i < 5; i++) {
      const res = await new Promise<http.IncomingMessage>((resolve, reject) =>
        http.get({ host: FRONT_IP, port, path: `/k${i}`, agent }, resolve).on('error', reject),
      );
      sockets.add(res.socket);
      res.resume();
      await new Promise((resolve) => res.on('end', resolve));
    }
    assert.equal(sockets.size, 1, 'one connection for five requests');
    const [socket] = sockets;
    await new Promise((resolve) => socket!.once('close', resolve));
    agent.destroy();
  });
});
