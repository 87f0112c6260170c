/**
 * Hostile traffic against the WAF, through a started `tps serve` (edge on, two proxy workers) over
 * real sockets: a flood that overloads the WAF delivers no attack with failMode CLOSED and counts
 * every uninspected request with OPEN; an SQL injection behind padding is refused or blocked at any
 * padding size and framing; a request sent behind a refused WebSocket handshake never reaches the
 * origin; a request whose client left, or whose origin is dead, leaves no WAF exchange open.
 *
 * The WAF's capacity is lowered (one thread per worker, two requests waiting per thread) so that
 * the flood overloads it on any machine.
 *
 * The network-level points (mutual TLS without a CRL, connection caps, HTTP/2 rapid reset, IPv6
 * /64 rotation, per-proxy rate-limit tables, the UDP reply budget, sign-in bounds) live in
 * `hostile-traffic/network.ts`, which runs with this file.
 */
import './hostile-traffic/network.ts';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { startTps, createTenant, type Tps } from '../support/tps.ts';
import { TenantApi } from '../support/api-client.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.0.170';
const ORIGIN = '127.0.0.171';
/** Nothing listens here: a dead origin. */
const DEAD_ORIGIN = '127.0.0.173';

const SQLI = "q=1' UNION SELECT password FROM users--";
const ATTACK_MARK = 'UNION SELECT';
const FLOOD_REQUESTS = 1500;
/** What the WAF inspects by default (ModSecurity's SecRequestBodyNoFilesLimit). */
const BODY_LIMIT = 131072;

/** A form body of `size` bytes that ends with the SQL injection. */
function paddedForm(size: number): Buffer {
  const tail = `&${SQLI}`;
  return Buffer.from(`pad=${'a'.repeat(Math.max(0, size - tail.length - 4))}${tail}`, 'latin1');
}

interface Outcome {
  status: number;
  error?: string;
}

/** One POST on its own connection; a connection the proxy cuts is an outcome too. */
function post(url: string, body: Buffer, headers: Record<string, string> = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    const request = http.request(
      url,
      {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'Mozilla/5.0', accept: '*/*', ...headers },
      },
      (response) => {
        response.resume();
        response.on('end', () => resolve({ status: response.statusCode ?? 0 }));
        response.on('error', () => resolve({ status: response.statusCode ?? 0 }));
      },
    );
    request.setTimeout(60_000, () => request.destroy(new Error('timeout')));
    request.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, error: err.code ?? err.message }));
    request.end(body);
  });
}

/**
 * A raw HTTP/1.1 POST: the head, then the body (Content-Length or chunked) in 64 KiB pieces while
 * the proxy has not answered. Resolves with the status the proxy answered (0: none) once it closes.
 */
function rawPost(
  port: number,
  path: string,
  body: Buffer,
  framing: 'length' | 'chunked',
  contentType = 'application/x-www-form-urlencoded',
): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: FRONTEND, port });
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    socket.on('error', () => {});
    socket.setTimeout(60_000, () => {
      socket.destroy();
      reject(new Error(`no answer to a ${body.length}-byte ${framing} body`));
    });
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0)));
    const framingHeader = framing === 'length' ? `Content-Length: ${body.length}` : 'Transfer-Encoding: chunked';
    socket.once('connect', async () => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\nAccept: */*\r\nContent-Type: ${contentType}\r\n${framingHeader}\r\nConnection: close\r\n\r\n`,
      );
      // A declared length over the limit is answered before any of the body: wait for that answer.
      if (framing === 'length' && body.length > BODY_LIMIT) await new Promise((r) => setTimeout(r, 200));
      for (let offset = 0; offset < body.length && received === '' && !socket.destroyed; offset += 65536) {
        const piece = body.subarray(offset, offset + 65536);
        const data =
          framing === 'length' ? piece : Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]);
        if (!socket.write(data)) await new Promise((r) => socket.once('drain', r).once('close', r));
      }
      if (framing === 'chunked' && received === '' && !socket.destroyed) socket.write('0\r\n\r\n');
    });
  });
}

/** The sum of a counter's samples whose labels include `labels`. */
function counter(metrics: string, name: string, labels: Record<string, string>): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (!Object.entries(labels).every(([key, value]) => line.includes(`${key}="${value}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

describe('hostile traffic against the WAF', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let originPort: number;
  /** Requests that reached the origin with the SQL injection, by path. */
  const attacksAt = new Map<string, number>();
  /** Requests that reached the origin, by path. */
  const seenAt = new Map<string, number>();
  /** Responses the origin holds back (path /hold). */
  const held: http.ServerResponse[] = [];

  before(async () => {
    origin = http.createServer({ maxHeaderSize: 65536 }, (request, response) => {
      const path = (request.url ?? '').split('?')[0]!;
      seenAt.set(path, (seenAt.get(path) ?? 0) + 1);
      let body = '';
      request.setEncoding('latin1');
      request.on('data', (chunk: string) => (body += chunk));
      request.on('end', () => {
        if (body.includes(ATTACK_MARK) || decodeURIComponent(request.url ?? '').includes(ATTACK_MARK))
          attacksAt.set(path, (attacksAt.get(path) ?? 0) + 1);
        if (path === '/hold') {
          held.push(response);
          return;
        }
        response.end('ok');
      });
    });
    origin.keepAliveTimeout = 1000;
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    originPort = (origin.address() as net.AddressInfo).port;
    tps = await startTps({
      env: {
        TPS_EDGE: 'true',
        TPS_EDGE_WORKERS: '2',
        TPS_FRONTEND_IPS: FRONTEND,
        TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8',
        TPS_WAF_THREADS: '1',
        TPS_WAF_QUEUE_LENGTH: '2',
      },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });

  after(async () => {
    for (const response of held) response.destroy();
    await tps.stop();
    origin.closeAllConnections();
    origin.close();
  });

  async function createProxy(
    waf: Record<string, unknown> = {},
    backend: { address: string; port: number } = { address: ORIGIN, port: originPort },
  ) {
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: { type: 'httpProxy', attributes: { frontend: { ipv4: FRONTEND, port }, backend: { hosts: [backend] }, waf } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined), {
      timeoutMs: 30_000,
    });
    return { id, port, url: `http://${FRONTEND}:${port}` };
  }

  async function metrics(): Promise<string> {
    return (await fetch(`${tps.metricsUrl}/metrics`)).text();
  }

  async function flood(url: string): Promise<Outcome[]> {
    const body = paddedForm(60 * 1024);
    return Promise.all(Array.from({ length: FLOOD_REQUESTS }, () => post(url, body)));
  }

  it('delivers no attack of a flood that overloads the WAF (failMode CLOSED, the default)', { timeout: 300_000 }, async (t) => {
    const proxy = await createProxy();
    assert.equal((await api.get(`${CONFIGS}/${proxy.id}`)).body.data.attributes.waf.failMode, 'CLOSED');
    const outcomes = await flood(`${proxy.url}/flood-closed`);
    const statuses = new Map<string, number>();
    for (const outcome of outcomes) {
      const key = outcome.error ?? String(outcome.status);
      statuses.set(key, (statuses.get(key) ?? 0) + 1);
    }
    t.diagnostic(`answers: ${JSON.stringify([...statuses])}`);
    assert.equal(attacksAt.get('/flood-closed') ?? 0, 0, `attacks delivered; answers: ${JSON.stringify([...statuses])}`);
    for (const outcome of outcomes)
      if (outcome.error === undefined) assert.ok([403, 503].includes(outcome.status), `answers: ${JSON.stringify([...statuses])}`);
    // The overload happened and was counted (refused: 503 with the page).
    const refused = await waitFor('the refusals counted', async () => {
      const n = counter(await metrics(), 'tps_edge_waf_uninspected_total', { proxy: proxy.id, outcome: 'refused' });
      return n === (statuses.get('503') ?? 0) && n > 0 ? n : undefined;
    });
    assert.ok(refused > 0);
  });

  it('counts every request it lets through uninspected (failMode OPEN): as many as the attacks the origin got', {
    timeout: 300_000,
  }, async (t) => {
    const proxy = await createProxy({ failMode: 'OPEN' });
    const outcomes = await flood(`${proxy.url}/flood-open`);
    for (const outcome of outcomes)
      if (outcome.error === undefined) assert.ok([200, 403].includes(outcome.status), `status ${outcome.status}`);
    const delivered = attacksAt.get('/flood-open') ?? 0;
    t.diagnostic(
      `${delivered} of ${FLOOD_REQUESTS} passed uninspected; ${outcomes.filter((o) => o.status === 403).length} blocked; ${outcomes.filter((o) => o.error !== undefined).length} cut`,
    );
    assert.ok(delivered > 0, 'the WAF was overloaded, some requests passed uninspected');
    assert.equal(delivered, outcomes.filter((outcome) => outcome.status === 200).length);
    await waitFor(`tps_edge_waf_uninspected_total{outcome="passed"} = ${delivered}`, async () => {
      return counter(await metrics(), 'tps_edge_waf_uninspected_total', { proxy: proxy.id, outcome: 'passed' }) === delivered || undefined;
    });
  });

  it('refuses or blocks an SQL injection behind padding of any size, chunked or with Content-Length', { timeout: 300_000 }, async () => {
    const proxy = await createProxy();
    const sizes = [60 * 1024, BODY_LIMIT - 1, BODY_LIMIT, BODY_LIMIT + 1, 200 * 1024, 1024 * 1024, 10 * 1024 * 1024];
    for (const size of sizes) {
      for (const framing of ['length', 'chunked'] as const) {
        const status = await rawPost(proxy.port, '/padding', paddedForm(size), framing);
        assert.equal(status, size <= BODY_LIMIT ? 403 : 413, `${size} bytes, ${framing}`);
      }
    }
    // An upload (multipart/form-data) may be longer: seen whole, then blocked; past its own limit, refused.
    const multipart = (fileSize: number) =>
      Buffer.from(
        `--b0undary\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\n${'a'.repeat(fileSize)}\r\n` +
          `--b0undary\r\nContent-Disposition: form-data; name="q"\r\n\r\n1' UNION SELECT password FROM users--\r\n--b0undary--\r\n`,
        'latin1',
      );
    for (const framing of ['length', 'chunked'] as const) {
      assert.equal(
        await rawPost(proxy.port, '/padding', multipart(300 * 1024), framing, 'multipart/form-data; boundary=b0undary'),
        403,
        `multipart, ${framing}`,
      );
      assert.equal(
        await rawPost(proxy.port, '/padding', multipart(2 * 1024 * 1024), framing, 'multipart/form-data; boundary=b0undary'),
        413,
        `large multipart, ${framing}`,
      );
    }
    assert.equal(attacksAt.get('/padding') ?? 0, 0);
    assert.equal(seenAt.get('/padding') ?? 0, 0);
    // The refusal is an event that says why.
    const events = (await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1000`)).body
      .data as any[];
    const refused = events.filter(
      (event) => event.relationships.trafficConfig.data.id === proxy.id && event.attributes.request.statusCode === 413,
    );
    assert.ok(refused.length > 0);
    assert.equal(refused[0].attributes.rules[0].modSecId, 200100);
    assert.equal(refused[0].attributes.action, 'BLOCKED');
  });

  it('inspects the first part of a longer body only when the proxy opts in, and the event says bodyTruncated', {
    timeout: 120_000,
  }, async () => {
    const proxy = await createProxy({ bodyLimitAction: 'PROCESS_PARTIAL' });
    assert.equal(await rawPost(proxy.port, '/partial', paddedForm(200 * 1024), 'length'), 200);
    assert.equal(attacksAt.get('/partial'), 1, 'opted in: the part past the limit went through uninspected');
    const event = await waitFor('the bodyTruncated event', async () => {
      const events = (await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1000`)).body
        .data as any[];
      return events.find((e) => e.relationships.trafficConfig.data.id === proxy.id);
    });
    assert.equal(event.attributes.bodyTruncated, true);
    assert.equal(event.attributes.action, 'LOGGED');
  });

  it('never lets a request sent behind a refused WebSocket handshake reach the origin', { timeout: 60_000 }, async () => {
    const heads: string[] = [];
    const refusing = net.createServer((socket) => {
      socket.on('error', () => {});
      let buffer = '';
      socket.on('data', (chunk: Buffer) => {
        buffer += chunk.toString('latin1');
        for (let end = buffer.indexOf('\r\n\r\n'); end !== -1; end = buffer.indexOf('\r\n\r\n')) {
          heads.push(buffer.slice(0, end));
          buffer = buffer.slice(end + 4);
          // Refused, and the connection kept open for more.
          socket.write('HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nno');
        }
      });
    });
    await new Promise<void>((resolve) => refusing.listen(0, ORIGIN, resolve));
    try {
      const proxy = await createProxy({}, { address: ORIGIN, port: (refusing.address() as net.AddressInfo).port });
      const handshake =
        'GET /chat HTTP/1.1\r\nHost: shop.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n';
      const smuggled =
        "GET /search?q=1'%20UNION%20SELECT%20password%20FROM%20users-- HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\n\r\n";
      for (const together of [true, false]) {
        const received = await new Promise<string>((resolve) => {
          const socket = net.connect({ host: FRONTEND, port: proxy.port }, () => socket.write(together ? handshake + smuggled : handshake));
          let text = '';
          socket.on('data', (chunk: Buffer) => {
            text += chunk.toString('latin1');
            if (!together && text.endsWith('no')) socket.write(smuggled);
          });
          socket.on('error', () => {});
          socket.on('close', () => resolve(text));
        });
        assert.match(received, /^HTTP\/1\.1 400 /);
        assert.equal(received.match(/HTTP\/1\.1 /g)?.length, 1, 'one answer, then the connection closed');
      }
      assert.equal(heads.length, 2);
      assert.ok(heads.every((head) => head.startsWith('GET /chat ')));
      assert.doesNotMatch(heads.join('\n'), /UNION/);
    } finally {
      refusing.close();
    }
  });

  it('ends the WAF exchange of a request whose client left, and of one whose origin is dead', { timeout: 120_000 }, async () => {
    const live = await createProxy();
    const deadPort = await freePort(DEAD_ORIGIN);
    const dead = await createProxy({}, { address: DEAD_ORIGIN, port: deadPort });
    const before = counter(await metrics(), 'tps_edge_waf_exchanges_total', { event: 'abandoned' });
    // A client that leaves while the origin holds its response.
    for (let i = 0; i < 3; i++) {
      const waiting = held.length;
      const socket = net.connect({ host: FRONTEND, port: live.port }, () =>
        socket.write('GET /hold HTTP/1.1\r\nHost: shop.test\r\nUser-Agent: Mozilla/5.0\r\nAccept: */*\r\n\r\n'),
      );
      socket.on('error', () => {});
      await waitFor('the origin holding the request', async () => held.length > waiting || undefined);
      socket.destroy();
    }
    // An origin nobody answers at.
    for (let i = 0; i < 3; i++) {
      const reply = await post(`${dead.url}/dead`, Buffer.from('a=1'));
      assert.equal(reply.status, 502);
    }
    await waitFor(
      'every exchange ended, none by the TTL',
      async () => {
        const text = await metrics();
        const count = (event: string) => counter(text, 'tps_edge_waf_exchanges_total', { event });
        const opened = count('opened');
        return opened > 0 &&
          count('abandoned') >= before + 6 &&
          opened === count('inspected') + count('abandoned') &&
          count('expired') === 0
          ? true
          : undefined;
      },
      { timeoutMs: 30_000 },
    );
  });
});
