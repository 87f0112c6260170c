/**
 * One request, one meaning: what the proxy decides on is what the origin receives. Through a started
 * `tps serve` (edge on) over real sockets, with an origin that logs every request it receives:
 *
 * - ambiguous request targets (RFC 3986 5.2.4 and 6, the path-confusion literature, Envoy's and
 *   nginx's normalisation options) reach the origin in their canonical form or not at all (400),
 *   under each `requestTarget.ambiguousPath` setting;
 * - a rule exclusion scoped to /public never applies to a request the origin serves from elsewhere;
 * - HTTP/2 to HTTP/1.1 by RFC 9113: one Host from :authority, a differing host refused,
 *   connection-specific fields and `te` other than trailers refused, cookies joined, a body that
 *   does not match its content-length never forwarded;
 * - a gzip-compressed SQL error page is blocked by the response rules as the plain one is.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import zlib from 'node:zlib';
import { canonicalTarget } from '../../src/edge/http/request-target.ts';
import { TenantApi } from '../support/api-client.ts';
import { rawH2Request, type RawH2Outcome } from '../support/h2-raw.ts';
import { request } from '../support/http-client.ts';
import { TestCa } from '../support/pki.ts';
import { freePort } from '../support/ports.ts';
import { createTenant, startTps, type Tps } from '../support/tps.ts';
import { waitFor } from '../support/wait.ts';

const CONFIGS = '/api/v2/traffic-mgmt/traffic-configs';
const EVENTS = '/api/v2/insight/http-security-events';
const FRONTEND = '127.0.0.190';
const ORIGIN = '127.0.0.191';
const HOST = 'shop.test';
/** A scanner's User-Agent: CRS rule 913100 alone blocks it (critical, paranoia 1). */
const SCANNER = 'Nikto';
const SQL_ERROR_PAGE = `<html><body><h1>Error</h1><p>You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version for the right syntax to use near '' at line 1</p></body></html>`;
const HARMLESS_PAGE = `<html><body><p>${'Nothing to see here. '.repeat(40)}</p></body></html>`;

/** The parts of a WAF_EVENT resource read here. */
interface WafEventDocument {
  attributes: { request: { path: string; messageHeader: string } };
  relationships: { trafficConfig: { data: { id: string } } };
}

interface Received {
  method: string;
  url: string;
  rawHeaders: string[];
  body: string;
}

/** Ambiguous targets and what the origin must receive for each setting (null: nothing, 400). */
interface TargetCase {
  target: string;
  refuse: string | null;
  normalize: string | null;
  keep: string | null;
}

const TARGETS: TargetCase[] = [
  // RFC 3986 5.2.4: dot segments, plain and percent-encoded.
  { target: '/a/../b', refuse: '/b', normalize: '/b', keep: '/b' },
  { target: '/a/./b', refuse: '/a/b', normalize: '/a/b', keep: '/a/b' },
  { target: '/a/%2e%2e/b', refuse: '/b', normalize: '/b', keep: '/b' },
  { target: '/a/.%2E/b', refuse: '/b', normalize: '/b', keep: '/b' },
  { target: '/../../etc/passwd', refuse: '/etc/passwd', normalize: '/etc/passwd', keep: '/etc/passwd' },
  { target: '/a/b/..', refuse: '/a/', normalize: '/a/', keep: '/a/' },
  // nginx merge_slashes (on by default here; KEEP's proxy turns it off).
  { target: '//a', refuse: '/a', normalize: '/a', keep: '//a' },
  { target: '/a//b/', refuse: '/a/b/', normalize: '/a/b/', keep: '/a//b/' },
  // RFC 3986 6.2.2: unreserved characters decoded, other escapes upper-cased.
  { target: '/%7Euser/%41%62', refuse: '/~user/Ab', normalize: '/~user/Ab', keep: '/~user/Ab' },
  { target: '/caf%c3%a9', refuse: '/caf%C3%A9', normalize: '/caf%C3%A9', keep: '/caf%C3%A9' },
  // Envoy path_with_escaped_slashes_action: encoded / and \, and a raw backslash.
  { target: '/a%2fb', refuse: null, normalize: '/a/b', keep: '/a%2Fb' },
  { target: '/a/%2E%2e%2fb', refuse: null, normalize: '/b', keep: '/a/..%2Fb' },
  { target: '/a%5Cb', refuse: null, normalize: '/a/b', keep: '/a%5Cb' },
  { target: '/a\\..\\b', refuse: null, normalize: '/b', keep: '/a%5C..%5Cb' },
  // Path parameters (Tomcat, Jetty): a dot segment once they are cut.
  { target: '/public/..;/admin', refuse: null, normalize: '/admin', keep: '/public/..;/admin' },
  { target: '/..;/admin', refuse: null, normalize: '/admin', keep: '/..;/admin' },
  { target: '/public/.;x/admin', refuse: null, normalize: '/public/admin', keep: '/public/.;x/admin' },
  { target: '/public/..%3b/admin', refuse: null, normalize: '/admin', keep: '/public/..%3B/admin' },
  { target: '/a;x/../b', refuse: '/b', normalize: '/b', keep: '/b' },
  // After decoding: NUL, overlong UTF-8 (a '.' to lax decoders), a bad escape.
  { target: '/a%00.html', refuse: null, normalize: null, keep: '/a%00.html' },
  { target: '/%c0%ae%c0%ae/etc/passwd', refuse: null, normalize: null, keep: '/%C0%AE%C0%AE/etc/passwd' },
  { target: '/a%zz', refuse: null, normalize: null, keep: '/a%25zz' },
  // The query is passed on as received.
  { target: '/a/../q?x=../%2f&y=%00', refuse: '/q?x=../%2f&y=%00', normalize: '/q?x=../%2f&y=%00', keep: '/q?x=../%2f&y=%00' },
  // RFC 9112 3.2.2 absolute form: its authority must be the Host.
  { target: `http://${HOST}/a/../b?q=1`, refuse: '/b?q=1', normalize: '/b?q=1', keep: '/b?q=1' },
  { target: 'http://evil.test/a', refuse: null, normalize: null, keep: null },
  { target: 'http://user@shop.test/a', refuse: null, normalize: null, keep: null },
  // Asterisk form is for OPTIONS only.
  { target: '*', refuse: null, normalize: null, keep: null },
];

/** Status line of a raw HTTP/1.1 request's answer (0: none), the request written as given. */
function rawRequest(port: number, head: string): Promise<number> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: FRONTEND, port });
    let received = '';
    socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
    socket.on('error', () => {});
    socket.setTimeout(15_000, () => socket.destroy());
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0)));
    socket.once('connect', () => socket.write(Buffer.from(head, 'latin1')));
  });
}

function get(port: number, target: string, probe: string, userAgent = 'Mozilla/5.0'): Promise<number> {
  return rawRequest(
    port,
    `GET ${target} HTTP/1.1\r\nHost: ${HOST}\r\nUser-Agent: ${userAgent}\r\nAccept: */*\r\nX-Probe: ${probe}\r\nConnection: close\r\n\r\n`,
  );
}

describe('one request, one meaning', () => {
  let tps: Tps;
  let api: TenantApi;
  let origin: http.Server;
  let originPort: number;
  /** What the origin received, by X-Probe. */
  const received = new Map<string, Received>();
  /** Requests the origin saw begin (headers), by X-Probe, whether or not their body ended. */
  const begun = new Set<string>();

  before(async () => {
    origin = http.createServer((req, res) => {
      const probe = String(req.headers['x-probe'] ?? '');
      begun.add(probe);
      let body = '';
      req.setEncoding('latin1');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        received.set(probe, { method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, body });
        const path = (req.url ?? '').split('?')[0];
        if (path === '/sql-error' || path === '/harmless') {
          const page = Buffer.from(path === '/sql-error' ? SQL_ERROR_PAGE : HARMLESS_PAGE);
          const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
          const bytes = gzip ? zlib.gzipSync(page) : page;
          res.writeHead(path === '/sql-error' ? 500 : 200, {
            'content-type': 'text/html; charset=utf-8',
            'content-length': bytes.length,
            ...(gzip ? { 'content-encoding': 'gzip', vary: 'accept-encoding' } : {}),
          });
          res.end(bytes);
          return;
        }
        res.end('ok');
      });
    });
    origin.keepAliveTimeout = 1000;
    await new Promise<void>((resolve) => origin.listen(0, ORIGIN, resolve));
    originPort = (origin.address() as net.AddressInfo).port;
    tps = await startTps({
      env: { TPS_EDGE: 'true', TPS_EDGE_WORKERS: '1', TPS_FRONTEND_IPS: FRONTEND, TPS_ORIGIN_ALLOWED_NETWORKS: '127.0.0.0/8' },
    });
    api = await TenantApi.connect(tps, await createTenant(tps));
  });

  after(async () => {
    await tps?.stop();
    origin?.closeAllConnections();
    origin?.close();
  });

  async function createProxy(attributes: Record<string, unknown> = {}, frontend: Record<string, unknown> = {}) {
    const port = await freePort(FRONTEND);
    const created = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port, ...frontend },
          backend: { hosts: [{ address: ORIGIN, port: originPort }] },
          ...attributes,
        },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.data.id as string;
    await waitFor('ACTIVE', async () => ((await api.get(`${CONFIGS}/${id}`)).body.data.attributes.status === 'ACTIVE' ? true : undefined), {
      timeoutMs: 30_000,
    });
    return { id, port, attributes: (await api.get(`${CONFIGS}/${id}`)).body.data.attributes };
  }

  let probes = 0;
  const nextProbe = () => `p${++probes}`;

  for (const setting of ['REFUSE', 'NORMALIZE', 'KEEP'] as const) {
    it(`ambiguous targets reach the origin canonical or not at all (ambiguousPath ${setting})`, { timeout: 120_000 }, async () => {
      const mergeSlashes = setting !== 'KEEP';
      // The WAF logs only: its rules (930100, path traversal, on the target as received) would block some of these.
      const proxy = await createProxy({
        waf: { mode: 'LOGGING' },
        ...(setting === 'REFUSE' ? {} : { requestTarget: { ambiguousPath: setting, mergeSlashes } }),
      });
      assert.deepEqual(proxy.attributes.requestTarget, { ambiguousPath: setting, mergeSlashes }, 'the setting, defaults applied');
      for (const testCase of TARGETS) {
        const expected = setting === 'REFUSE' ? testCase.refuse : setting === 'NORMALIZE' ? testCase.normalize : testCase.keep;
        const probe = nextProbe();
        const status = await get(proxy.port, testCase.target, probe);
        const seen = received.get(probe);
        if (expected === null) {
          assert.equal(status, 400, `${testCase.target}: refused`);
          assert.equal(seen, undefined, `${testCase.target}: the origin got nothing`);
          continue;
        }
        assert.equal(status, 200, `${testCase.target}: passed`);
        assert.equal(seen?.url, expected, `${testCase.target}: the origin got the canonical target`);
        // What the origin got reads the same again: nothing left for another parser to resolve.
        const again = canonicalTarget(seen.url, { ambiguousPath: setting, mergeSlashes });
        assert.ok(again.ok && again.value.target === seen.url, `${seen.url} is a fixed point`);
      }
      // Counted by reason (workers report their counters to the supervisor now and then).
      const reasons =
        setting === 'REFUSE' ? ['MALFORMED_TARGET', 'ESCAPED_SLASH', 'DOT_SEGMENT_PARAMETERS', 'INVALID_UTF8'] : ['HOST_MISMATCH'];
      await waitFor('the refusals on /metrics', async () => {
        const metrics = await (await fetch(`${tps.metricsUrl}/metrics`)).text();
        return reasons.every((reason) =>
          new RegExp(`tps_edge_refused_total\\{[^}]*proxy="${proxy.id}"[^}]*reason="${reason}"[^}]*\\} [1-9]`).test(metrics),
        )
          ? true
          : undefined;
      });
    });
  }

  it('validates the setting: a bad value is 422 pointing at it', async () => {
    const port = await freePort(FRONTEND);
    const answer = await api.call('POST', CONFIGS, {
      data: {
        type: 'httpProxy',
        attributes: {
          frontend: { ipv4: FRONTEND, port },
          backend: { hosts: [{ address: ORIGIN, port: originPort }] },
          requestTarget: { ambiguousPath: 'IGNORE' },
        },
      },
    });
    assert.equal(answer.status, 422, JSON.stringify(answer.body));
    assert.equal(answer.body.errors[0].source.pointer, '/data/attributes/requestTarget/ambiguousPath');
  });

  it('refuses a second Host header (HTTP/1.1)', async () => {
    const proxy = await createProxy();
    const probe = nextProbe();
    const status = await rawRequest(
      proxy.port,
      `GET /a HTTP/1.1\r\nHost: ${HOST}\r\nHost: evil.test\r\nX-Probe: ${probe}\r\nConnection: close\r\n\r\n`,
    );
    assert.equal(status, 400);
    assert.equal(received.get(probe), undefined);
  });

  for (const setting of ['REFUSE', 'NORMALIZE'] as const) {
    it(`an exclusion scoped to /public never applies to a request served from elsewhere (ambiguousPath ${setting})`, {
      timeout: 120_000,
    }, async () => {
      const proxy = await createProxy({
        waf: { ruleExclusions: [{ ruleIds: [913100], pathPrefix: '/public' }] },
        ...(setting === 'NORMALIZE' ? { requestTarget: { ambiguousPath: 'NORMALIZE' } } : {}),
      });
      const probeOf = async (target: string) => {
        const probe = nextProbe();
        return { status: await get(proxy.port, target, probe, SCANNER), seen: received.get(probe) };
      };
      // The exclusion works where it is meant to, and the rule blocks elsewhere.
      assert.equal((await probeOf('/public/page')).status, 200);
      assert.equal((await probeOf('/admin')).status, 403, 'rule 913100 blocks the scanner outside /public');
      const attempts = [
        '/public/../admin',
        '/public/%2e%2e/admin',
        '/public/..;/admin',
        '/public/.%2e;/admin',
        '/public/..%3b/admin',
        '/public%2f..%2fadmin',
        '/public\\..\\admin',
        '/public//../admin',
        '/public;x/../admin',
        '/%70ublic/../admin',
        `http://${HOST}/public/../admin`,
        '/public/%c0%ae%c0%ae/admin',
      ];
      for (const target of attempts) {
        const { status, seen } = await probeOf(target);
        if (seen !== undefined) {
          const path = seen.url.split('?')[0]!;
          assert.ok(
            path === '/public' || path.startsWith('/public/'),
            `${target}: the origin served ${seen.url} under /public's exclusion`,
          );
        } else {
          assert.ok(status === 400 || status === 403, `${target}: ${status}`);
        }
      }
      // The WAF_EVENT names the path the proxy decided on (the one to scope an exclusion to).
      const traversal = await waitFor('the WAF event of /public/../admin', async () => {
        const all = (await api.get(`${EVENTS}?filter[tenantId]=${api.tenantId}&filter[eventType]=WAF_EVENT&page[size]=1000`)).body
          .data as WafEventDocument[];
        return all.find(
          (event) =>
            event.relationships.trafficConfig.data.id === proxy.id &&
            event.attributes.request.messageHeader.startsWith('GET /public/../admin '),
        );
      });
      assert.equal(traversal.attributes.request.path, '/admin');
    });
  }

  describe('HTTP/2 to HTTP/1.1', () => {
    let ca: TestCa;
    let port: number;

    before(async () => {
      ca = await TestCa.create();
      const leaf = await ca.issue({ commonName: HOST, dnsNames: [HOST] });
      const certificate = await api.call('POST', '/api/v2/traffic-mgmt/certificates/pem', {
        data: { type: 'certificate', attributes: { certificate: leaf.certificatePem, privateKey: leaf.privateKeyPem } },
      });
      assert.equal(certificate.status, 201, JSON.stringify(certificate.body));
      port = (await createProxy({}, { certificateId: certificate.body.data.id })).port;
    });

    /** One request with Node's client: the status, or the stream's error code. */
    async function h2(headers: http2.OutgoingHttpHeaders, body?: string): Promise<string> {
      const session = http2.connect(`https://${FRONTEND}:${port}`, { ca: ca.certificatePem, servername: HOST });
      session.on('error', () => {});
      try {
        return await new Promise<string>((resolve) => {
          const stream = session.request({ ':authority': HOST, ...headers }, { endStream: body === undefined });
          let status = '';
          stream.on('response', (head) => (status = String(head[':status'])));
          stream.on('error', (err: NodeJS.ErrnoException) => resolve(status || err.code || 'error'));
          stream.on('close', () => resolve(status || `reset ${stream.rstCode}`));
          stream.resume();
          if (body !== undefined) stream.end(body);
        });
      } finally {
        session.close();
      }
    }

    const raw = (headers: [string, string][], body?: Buffer): Promise<RawH2Outcome> =>
      rawH2Request({ host: FRONTEND, port, ca: ca.certificatePem, servername: HOST, headers, ...(body && { body }) });

    const base = (probe: string, method = 'GET'): [string, string][] => [
      [':method', method],
      [':scheme', 'https'],
      [':path', '/h2'],
      [':authority', HOST],
      ['x-probe', probe],
    ];

    const refused = (outcome: RawH2Outcome): boolean =>
      outcome.kind === 'reset' || outcome.kind === 'goaway' || (outcome.kind === 'response' && outcome.status === 400);

    it('sends exactly one Host, from :authority, and joins cookie crumbs', async () => {
      const probe = nextProbe();
      assert.equal(await h2({ ':path': '/h2', 'x-probe': probe, cookie: ['a=1', 'b=2'] }), '200');
      const seen = received.get(probe)!;
      const hosts = seen.rawHeaders.filter((_, i) => i % 2 === 0 && seen.rawHeaders[i]!.toLowerCase() === 'host');
      assert.equal(hosts.length, 1);
      const value = (name: string) => seen.rawHeaders.filter((_, i) => i % 2 === 1 && seen.rawHeaders[i - 1]!.toLowerCase() === name);
      assert.deepEqual(value('host'), [HOST]);
      assert.deepEqual(value('cookie'), ['a=1; b=2']);
    });

    it('reads :path as an HTTP/1.1 target is read', async () => {
      const probe = nextProbe();
      // (Nothing the WAF's traversal rules would block: this proxy's WAF is in BLOCKING mode.)
      assert.equal(await h2({ ':path': '/%7Ea/./b;x//c?q=%2f', 'x-probe': probe }), '200');
      assert.equal(received.get(probe)?.url, '/~a/b;x/c?q=%2f');
      for (const path of ['/public/..;/admin', '/a%2fb', '/a%00b']) {
        const refusedProbe = nextProbe();
        assert.equal(await h2({ ':path': path, 'x-probe': refusedProbe }), '400', path);
        assert.equal(begun.has(refusedProbe), false, path);
      }
    });

    it('refuses a host header that differs from :authority', async () => {
      const probe = nextProbe();
      assert.equal(await h2({ ':path': '/h2', 'x-probe': probe, host: 'evil.test' }), '400');
      assert.equal(begun.has(probe), false);
      const same = nextProbe();
      assert.equal(await h2({ ':path': '/h2', 'x-probe': same, host: HOST }), '200', 'the same host is fine');
      const seen = received.get(same)!;
      const hosts = seen.rawHeaders.filter((_, i) => i % 2 === 1 && seen.rawHeaders[i - 1]!.toLowerCase() === 'host');
      assert.deepEqual(hosts, [HOST], 'and sent on once');
    });

    it('refuses a second host header, even one equal to :authority', async () => {
      const probe = nextProbe();
      const outcome = await raw([...base(probe), ['host', HOST], ['host', 'evil.test']]);
      assert.ok(refused(outcome), JSON.stringify(outcome));
      assert.equal(begun.has(probe), false);
    });

    for (const [name, value] of [
      ['connection', 'keep-alive'],
      ['keep-alive', 'timeout=5'],
      ['proxy-connection', 'keep-alive'],
      ['transfer-encoding', 'chunked'],
      ['upgrade', 'websocket'],
      ['te', 'gzip'],
    ] as const) {
      it(`refuses the connection-specific field ${name}: ${value}`, async () => {
        const probe = nextProbe();
        const outcome = await raw([...base(probe), [name, value]]);
        assert.ok(refused(outcome), JSON.stringify(outcome));
        assert.equal(begun.has(probe), false);
      });
    }

    it('lets te: trailers through (and does not forward it)', async () => {
      const probe = nextProbe();
      const outcome = await raw([...base(probe), ['te', 'trailers']]);
      assert.deepEqual(outcome, { kind: 'response', status: 200 });
      assert.ok(received.get(probe) !== undefined);
    });

    it('never forwards a content-length on a stream its headers ended (no body)', async () => {
      const probe = nextProbe();
      const outcome = await raw([...base(probe), ['content-length', '10']]);
      assert.ok(refused(outcome), JSON.stringify(outcome));
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(begun.has(probe), false);
    });

    for (const [declared, sent, contentType] of [
      [10, 'abc', 'application/x-www-form-urlencoded'],
      [10, 'abc', 'application/octet-stream'],
      [2, 'abcdef', 'application/x-www-form-urlencoded'],
    ] as const) {
      it(`never forwards a ${sent.length}-byte body declared as ${declared} (${contentType})`, async () => {
        const probe = nextProbe();
        const outcome = await raw(
          [...base(probe, 'POST'), ['content-type', contentType], ['content-length', String(declared)]],
          Buffer.from(sent),
        );
        assert.ok(refused(outcome), JSON.stringify(outcome));
        // The origin may have seen a request begin (a streamed body); it never got one whole.
        await new Promise((resolve) => setTimeout(resolve, 200));
        assert.equal(received.get(probe), undefined);
      });
    }
  });

  it('blocks a gzip-compressed SQL error page as it blocks the plain one, and passes compressed pages on as they are', async () => {
    const proxy = await createProxy();
    const url = `http://${FRONTEND}:${proxy.port}`;
    const plain = await request(`${url}/sql-error`, { headers: { host: HOST } });
    assert.equal(plain.status, 403, 'the response rules (RESPONSE-951, SQL errors) block the plain page');
    assert.ok(!plain.text.includes('SQL syntax'));
    const compressed = await request(`${url}/sql-error`, { headers: { host: HOST, 'accept-encoding': 'gzip' } });
    assert.equal(compressed.status, 403, 'and the gzip one');
    assert.ok(
      !zlib
        .gunzipSync(compressed.headers['content-encoding'] === 'gzip' ? compressed.body : zlib.gzipSync(compressed.body))
        .toString()
        .includes('SQL syntax'),
    );
    const harmless = await request(`${url}/harmless`, { headers: { host: HOST, 'accept-encoding': 'gzip' } });
    assert.equal(harmless.status, 200);
    assert.equal(harmless.headers['content-encoding'], 'gzip', 'the client gets the compressed bytes');
    assert.equal(zlib.gunzipSync(harmless.body).toString(), HARMLESS_PAGE);
  });
});
