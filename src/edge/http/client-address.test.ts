/**
 * The client address behind load balancers, over real sockets on loopback: X-Forwarded-For and
 * PROXY protocol (v1, v2, before TLS) from a trusted peer name the client for every phase (geo
 * fencing, rate limiting, WAF, events, access log, the origin's headers); from anyone else they
 * change nothing. See src/net/client-address.ts.
 */
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import { after, before, describe, it } from 'node:test';
import type { AppDdosAttackEvent, WafEvent } from '@tps/model';
import { ClientAddressPolicy } from '../../net/client-address.ts';
import type { ClientAddressSettings } from '../../net/types.ts';
import { encodeProxyV1, encodeProxyV2 } from '../../net/proxy-protocol.ts';
import { HttpProxy } from './http-proxy.ts';
import type { AccessLogEntry } from '../access-log/types.ts';
import type { HttpProxyDeps } from './types.ts';
import type { WafHook, WafRequestInput } from './waf/types.ts';
import { request } from '../../../test/support/http-client.ts';
import { TestCa, type IssuedCertificate } from '../../../test/support/pki.ts';
import {
  FRONT_IP,
  freePort,
  resolvedProxy,
  startOrigin,
  testDeps,
  type EchoReply,
  type TestOrigin,
} from '../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };
/** The load balancer in front of the edge, and a CDN in front of it: both trusted. */
const LB = '127.0.0.9';
const CDN = '127.0.0.10';
/** A client that reaches the edge directly (not trusted). */
const DIRECT = '127.0.0.1';
/** Placed in countries by testDeps' geo overrides. */
const IN_DE = '127.0.0.20';
const IN_US = '127.0.0.21';

/** What the proxy under test needs; each test starts its own. */
interface Started {
  proxy: HttpProxy;
  port: number;
  base: string;
  deps: ReturnType<typeof testDeps>;
  accessLog: AccessLogEntry[];
  wafSeen: WafRequestInput[];
}

/**
 * Connects from `localAddress`, writes `parts` one after the other (each its own packet), then reads
 * until the proxy closes: everything it answered ('' when it closed without a word).
 */
async function raw(port: number, localAddress: string, ...parts: (Buffer | string)[]): Promise<string> {
  const socket = net.connect({ host: FRONT_IP, port, localAddress });
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('connect', resolve));
  let text = '';
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
  const closed = new Promise((resolve) => socket.once('close', resolve));
  for (const part of parts) {
    await new Promise((resolve) => socket.write(part, resolve));
    await new Promise((resolve) => setImmediate(resolve));
  }
  await closed;
  return text;
}

/** The echo replies in a raw HTTP/1.1 exchange (one per response, in order). */
function echoes(text: string): EchoReply[] {
  return [...text.matchAll(/\r\n\r\n(\{.*?"origin":"origin"\})/gs)].map((match) => JSON.parse(match[1]!) as EchoReply);
}

const get = (path: string, headers: Record<string, string> = {}, close = true) =>
  `GET ${path} HTTP/1.1\r\nHost: shop.test\r\n${Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('')}${close ? 'Connection: close\r\n' : ''}\r\n`;

const proxied = (sourceAddress: string, port: number) => ({
  sourceAddress,
  sourcePort: 40123,
  destinationAddress: FRONT_IP,
  destinationPort: port,
});

describe('HTTP proxy behind load balancers (client address)', () => {
  let ca: TestCa;
  let leaf: IssuedCertificate;
  let origin: TestOrigin;
  const started: HttpProxy[] = [];

  async function startProxy(
    settings: ClientAddressSettings | undefined,
    extra: NonNullable<Parameters<typeof resolvedProxy>[2]> = {},
  ): Promise<Started> {
    const port = await freePort(FRONT_IP);
    const accessLog: AccessLogEntry[] = [];
    const wafSeen: WafRequestInput[] = [];
    const waf: WafHook = {
      requestBodyLimit: 0,
      inspectRequest(input) {
        wafSeen.push(input);
        return input.url.includes('attack')
          ? {
              action: 'block',
              event: {
                action: 'BLOCKED',
                rules: [{ modSecId: 942100, name: 'test rule', matchedData: { status: 'DISABLED', value: null } }] as WafEvent['rules'],
              },
            }
          : { action: 'continue' };
      },
    };
    const clientAddress = ClientAddressPolicy.from(settings, { headerTimeoutMs: 2_000 });
    const overrides: Partial<HttpProxyDeps> = { accessLog: (entry) => accessLog.push(entry), waf, ...(clientAddress && { clientAddress }) };
    const deps = testDeps(overrides);
    const proxy = new HttpProxy(resolvedProxy(port, [origin], extra), deps);
    await proxy.start();
    started.push(proxy);
    const scheme = extra.frontendCertificate ? 'https' : 'http';
    return { proxy, port, base: `${scheme}://${FRONT_IP}:${port}`, deps, accessLog, wafSeen };
  }

  before(async () => {
    ca = await TestCa.create('Client address CA');
    leaf = await ca.issue({ commonName: 'shop.test', dnsNames: ['shop.test'], ipAddresses: [FRONT_IP] });
    origin = await startOrigin();
  });

  after(async () => {
    await Promise.all(started.map((proxy) => proxy.stop()));
    await origin.close();
  });

  describe('X-Forwarded-For', () => {
    const trustLb: ClientAddressSettings = { trustedProxies: [`${LB}/32`, CDN], listenerProxyProtocol: 'off' };

    it('from a trusted peer names the client for the WAF, the access log and the origin', T, async () => {
      const { base, accessLog, wafSeen } = await startProxy(trustLb);
      const res = await request(`${base}/hello`, {
        localAddress: LB,
        headers: { 'x-forwarded-for': 'spoofed, 198.51.100.7, 127.0.0.10', 'x-real-ip': '6.6.6.6' },
      });
      assert.equal(res.status, 200);
      const echo = JSON.parse(res.text) as EchoReply;
      assert.equal(
        echo.headers['x-forwarded-for'],
        'spoofed, 198.51.100.7',
        'the trusted hops are folded away: the last entry is the client',
      );
      assert.equal(echo.headers['x-real-ip'], '198.51.100.7', "the client's own X-Real-IP is replaced");
      assert.equal(wafSeen.at(-1)?.client.ip, '198.51.100.7', 'REMOTE_ADDR of the WAF');
      const entry = accessLog.at(-1)!;
      assert.equal(entry.clientIp, '198.51.100.7');
      assert.equal(entry.clientPort, 0);
      assert.equal(entry.clientIpSource, 'x-forwarded-for');
      assert.equal(entry.peerIp, LB);
    });

    it('from an untrusted peer is ignored: the peer is the client and the origin sees it last', T, async () => {
      const { base, accessLog, wafSeen } = await startProxy(trustLb);
      const res = await request(`${base}/hello`, { localAddress: DIRECT, headers: { 'x-forwarded-for': '198.51.100.7' } });
      const echo = JSON.parse(res.text) as EchoReply;
      assert.equal(echo.headers['x-forwarded-for'], `198.51.100.7, ${DIRECT}`);
      assert.equal(echo.headers['x-real-ip'], DIRECT);
      assert.equal(wafSeen.at(-1)?.client.ip, DIRECT);
      assert.equal(accessLog.at(-1)?.clientIp, DIRECT);
      assert.equal(accessLog.at(-1)?.clientIpSource, undefined);
    });

    it('is never read without TPS_TRUSTED_PROXIES', T, async () => {
      const { base, accessLog } = await startProxy(undefined);
      const res = await request(`${base}/`, { localAddress: LB, headers: { 'x-forwarded-for': '198.51.100.7' } });
      assert.equal((JSON.parse(res.text) as EchoReply).headers['x-forwarded-for'], `198.51.100.7, ${LB}`);
      assert.equal(accessLog.at(-1)?.clientIp, LB);
    });

    it('geo fencing: the country of the resolved client, never of a spoofed address', T, async () => {
      const { base } = await startProxy(trustLb, { attributes: { geoFencing: { mode: 'ALLOW_LISTED', countries: ['DE'] } } });
      assert.equal((await request(`${base}/`, { localAddress: LB, headers: { 'x-forwarded-for': IN_DE } })).status, 200);
      assert.equal((await request(`${base}/`, { localAddress: LB, headers: { 'x-forwarded-for': IN_US } })).status, 403);
      // Direct, claiming to be in Germany: the peer's country counts (none), so refused.
      assert.equal((await request(`${base}/`, { localAddress: DIRECT, headers: { 'x-forwarded-for': IN_DE } })).status, 403);
    });

    it('rate limiting: counted per resolved client behind the load balancer, per peer otherwise', T, async () => {
      const { base, deps } = await startProxy(trustLb, {
        attributes: { rateLimiting: { thresholds: [{ requests: 2, periodSeconds: 60 }], blockSeconds: 60 } },
      });
      const statuses = async (localAddress: string, forwardedFor: (i: number) => string) => {
        const out: number[] = [];
        for (let i = 0; i < 3; i++)
          out.push((await request(`${base}/`, { localAddress, headers: { 'x-forwarded-for': forwardedFor(i) } })).status);
        return out;
      };
      // Two clients behind one load balancer: neither is blocked by the other's requests.
      assert.deepEqual(await statuses(LB, (i) => (i % 2 === 0 ? '198.51.100.1' : '198.51.100.2')), [200, 200, 200]);
      assert.deepEqual(await statuses(LB, () => '198.51.100.3'), [200, 200, 429]);
      // A direct client cannot escape its counter by rotating X-Forwarded-For.
      assert.deepEqual(await statuses(DIRECT, (i) => `203.0.113.${i + 1}`), [200, 200, 429]);
      const attacks = deps.insight.events.filter((event): event is AppDdosAttackEvent => event.type === 'APP_DDOS_ATTACK');
      assert.deepEqual(attacks.map((event) => event.source.ip).sort(), ['127.0.0.1', '198.51.100.3']);
    });

    it('WAF events carry the resolved client', T, async () => {
      const { base, deps } = await startProxy(trustLb);
      assert.equal((await request(`${base}/attack`, { localAddress: LB, headers: { 'x-forwarded-for': '198.51.100.9' } })).status, 403);
      await new Promise((resolve) => setTimeout(resolve, 50)); // the event is recorded when the response ends
      const event = deps.insight.events.find((e): e is WafEvent => e.type === 'WAF_EVENT');
      assert.equal(event?.source.ip, '198.51.100.9');
    });
  });

  describe('PROXY protocol', () => {
    const optional: ClientAddressSettings = { trustedProxies: [LB, CDN], listenerProxyProtocol: 'optional' };
    const required: ClientAddressSettings = { trustedProxies: [LB, CDN], listenerProxyProtocol: 'required' };

    it('v1 from a trusted peer names the client, on every request of a kept-alive connection', T, async () => {
      const { port, accessLog } = await startProxy(optional);
      const text = await raw(
        port,
        LB,
        Buffer.concat([encodeProxyV1(proxied('198.51.100.7', port)), Buffer.from(get('/one', {}, false))]),
        get('/two'),
      );
      const replies = echoes(text);
      assert.equal(replies.length, 2, text);
      for (const echo of replies) {
        assert.equal(echo.headers['x-forwarded-for'], '198.51.100.7');
        assert.equal(echo.headers['x-real-ip'], '198.51.100.7');
      }
      assert.deepEqual(
        accessLog.slice(-2).map((entry) => [entry.clientIp, entry.clientPort, entry.clientIpSource, entry.peerIp]),
        [
          ['198.51.100.7', 40123, 'proxy-protocol', LB],
          ['198.51.100.7', 40123, 'proxy-protocol', LB],
        ],
      );
    });

    it('v2 (IPv6 client) sent in a packet of its own before the request', T, async () => {
      const { port } = await startProxy(optional);
      const text = await raw(port, LB, encodeProxyV2(proxied('2001:db8::7', port), 'TCP'), get('/'));
      assert.equal(echoes(text)[0]?.headers['x-forwarded-for'], '2001:db8::7', text);
    });

    it('optional: a trusted peer may also connect without a header (its X-Forwarded-For then counts)', T, async () => {
      const { port } = await startProxy(optional);
      const text = await raw(port, LB, get('/', { 'x-forwarded-for': '198.51.100.8' }));
      assert.equal(echoes(text)[0]?.headers['x-forwarded-for'], '198.51.100.8', text);
    });

    it('the address in the header is where the X-Forwarded-For walk starts (CDN -> L4 load balancer -> edge)', T, async () => {
      const { port } = await startProxy(optional);
      // The load balancer's header names the CDN (trusted), whose X-Forwarded-For names the client.
      const text = await raw(
        port,
        LB,
        Buffer.concat([encodeProxyV1(proxied(CDN, port)), Buffer.from(get('/', { 'x-forwarded-for': '198.51.100.9' }))]),
      );
      assert.equal(echoes(text)[0]?.headers['x-forwarded-for'], '198.51.100.9', text);
      // A header naming an untrusted client: that client's own X-Forwarded-For is just data.
      const direct = await raw(
        port,
        LB,
        Buffer.concat([encodeProxyV1(proxied('198.51.100.9', port)), Buffer.from(get('/', { 'x-forwarded-for': '1.1.1.1' }))]),
      );
      assert.equal(echoes(direct)[0]?.headers['x-forwarded-for'], '1.1.1.1, 198.51.100.9', direct);
    });

    it('from an untrusted peer a header is not read: it is a bad request, and the origin sees nothing', T, async () => {
      const { port } = await startProxy(optional);
      const before = origin.requests;
      const text = await raw(port, DIRECT, Buffer.concat([encodeProxyV1(proxied('198.51.100.7', port)), Buffer.from(get('/'))]));
      assert.match(text, /^HTTP\/1\.1 400 /);
      assert.equal(origin.requests, before);
    });

    it('required: a trusted peer without a header is closed; direct clients still connect', T, async () => {
      const { port } = await startProxy(required);
      const before = origin.requests;
      assert.equal(await raw(port, LB, get('/')), '', 'closed without an answer');
      assert.equal(origin.requests, before);
      const direct = await raw(port, DIRECT, get('/'));
      assert.equal(echoes(direct)[0]?.headers['x-forwarded-for'], DIRECT, direct);
      const withHeader = await raw(port, LB, Buffer.concat([encodeProxyV2(proxied('198.51.100.7', port), 'TCP'), Buffer.from(get('/'))]));
      assert.equal(echoes(withHeader)[0]?.headers['x-forwarded-for'], '198.51.100.7', withHeader);
    });

    it('a malformed header is closed, not read as a request', T, async () => {
      const { port } = await startProxy(optional);
      assert.equal(await raw(port, LB, 'PROXY TCP4 198.51.100.7 nonsense 1 2\r\n', get('/')), '');
    });

    it('geo fencing and rate limiting key on the address in the header', T, async () => {
      const { port, deps } = await startProxy(required, {
        attributes: {
          geoFencing: { mode: 'ALLOW_LISTED', countries: ['DE'] },
          rateLimiting: { thresholds: [{ requests: 1, periodSeconds: 60 }], blockSeconds: 60 },
        },
      });
      const status = async (client: string) =>
        /^HTTP\/1\.1 (\d+)/.exec(await raw(port, LB, Buffer.concat([encodeProxyV1(proxied(client, port)), Buffer.from(get('/'))])))?.[1];
      assert.equal(await status(IN_US), '403');
      assert.equal(await status(IN_DE), '200');
      assert.equal(await status(IN_DE), '429');
      const attack = deps.insight.events.find((event): event is AppDdosAttackEvent => event.type === 'APP_DDOS_ATTACK');
      assert.equal(attack?.source.ip, IN_DE);
    });

    describe('before TLS', () => {
      /** Opens a TCP connection from the load balancer, sends `header`, then starts TLS on it. */
      async function tlsAfterHeader(port: number, header: Buffer | undefined, alpn: string): Promise<tls.TLSSocket> {
        const socket = net.connect({ host: FRONT_IP, port, localAddress: LB });
        socket.on('error', () => {});
        await new Promise((resolve) => socket.once('connect', resolve));
        if (header !== undefined) await new Promise((resolve) => socket.write(header, resolve));
        const secure = tls.connect({ socket, servername: 'shop.test', ca: ca.certificatePem, ALPNProtocols: [alpn] });
        await new Promise<void>((resolve, reject) => {
          secure.once('secureConnect', resolve);
          secure.once('error', reject);
        });
        return secure;
      }

      it('HTTP/1.1 over TLS after a v2 header', T, async () => {
        const { port, accessLog } = await startProxy(required, {
          frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem },
        });
        const secure = await tlsAfterHeader(port, encodeProxyV2(proxied('198.51.100.7', port), 'TCP'), 'http/1.1');
        let text = '';
        secure.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
        const ended = new Promise((resolve) => secure.once('close', resolve));
        secure.write(get('/tls'));
        await ended;
        const echo = echoes(text)[0];
        assert.equal(echo?.headers['x-forwarded-for'], '198.51.100.7', text);
        assert.equal(echo?.headers['x-forwarded-proto'], 'https');
        assert.equal(accessLog.at(-1)?.tls, true);
        assert.equal(accessLog.at(-1)?.clientIpSource, 'proxy-protocol');
      });

      it('HTTP/2 over TLS after a v1 header', T, async () => {
        const { port, base } = await startProxy(optional, {
          frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem },
        });
        const secure = await tlsAfterHeader(port, encodeProxyV1(proxied('198.51.100.8', port)), 'h2');
        assert.equal(secure.alpnProtocol, 'h2');
        const session = http2.connect(base, { createConnection: () => secure });
        try {
          const body = await new Promise<string>((resolve, reject) => {
            const stream = session.request({ ':path': '/h2', ':authority': 'shop.test' });
            let text = '';
            stream.setEncoding('utf8');
            stream.on('data', (chunk: string) => (text += chunk));
            stream.on('end', () => resolve(text));
            stream.on('error', reject);
          });
          const echo = JSON.parse(body) as EchoReply;
          assert.equal(echo.headers['x-forwarded-for'], '198.51.100.8');
          assert.equal(echo.headers['x-real-ip'], '198.51.100.8');
        } finally {
          session.close();
        }
      });

      it('required: a trusted peer starting TLS without a header gets no handshake', T, async () => {
        const { port } = await startProxy(required, {
          frontendCertificate: { certificatePem: leaf.certificatePem, privateKeyPem: leaf.privateKeyPem },
        });
        await assert.rejects(tlsAfterHeader(port, undefined, 'http/1.1'));
        // An untrusted peer's TLS needs no header.
        const res = await request(`https://${FRONT_IP}:${port}/`, { localAddress: DIRECT, ca: ca.certificatePem, servername: 'shop.test' });
        assert.equal((JSON.parse(res.text) as EchoReply).headers['x-forwarded-for'], DIRECT);
      });
    });
  });
});
