/**
 * The upstream phase over real sockets: origin TLS with each validation variant and mutual TLS,
 * fail-over between hosts, retries only where they are safe, and our 502/504 pages.
 */
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { HttpProxy } from '../http-proxy.ts';
import type { HttpLimits } from '../limits.ts';
import type { AccessLogEntry } from '../../access-log/types.ts';
import type { ResolvedHttpProxy } from '../types.ts';
import { request } from '../../../../test/support/http-client.ts';
import { TestCa, selfSigned, type IssuedCertificate } from '../../../../test/support/pki.ts';
import { recordingOriginGuard } from '../../../../test/support/origin-guard.ts';
import type { OriginGuard } from '../../../net/origin-guard.ts';
import {
  FRONT_IP,
  ORIGIN_IP,
  ORIGIN_IP_2,
  freePort,
  resolvedProxy,
  startOrigin,
  testDeps,
  type EchoReply,
  type TestOrigin,
} from '../../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };

describe('upstream phase', () => {
  const stops: (() => Promise<void>)[] = [];
  const log: AccessLogEntry[] = [];
  let originCa: TestCa;
  let otherCa: TestCa;
  let proxyClientCa: TestCa;
  let proxyClient: IssuedCertificate;

  async function proxyTo(
    hosts: readonly { host: string; port: number }[],
    extra: Parameters<typeof resolvedProxy>[2] = {},
    limits: Partial<HttpLimits> = {},
    originGuard?: OriginGuard,
  ): Promise<string> {
    const port = await freePort(FRONT_IP);
    const proxy = new HttpProxy(
      resolvedProxy(port, hosts, extra),
      testDeps({ limits, accessLog: (e) => log.push(e), ...(originGuard && { originGuard }) }),
    );
    await proxy.start();
    stops.push(() => proxy.stop());
    return `http://${FRONT_IP}:${port}`;
  }

  async function origin(options: Parameters<typeof startOrigin>[0] = {}): Promise<TestOrigin> {
    const o = await startOrigin(options);
    stops.push(() => o.close());
    return o;
  }

  before(async () => {
    originCa = await TestCa.create('Origin CA');
    otherCa = await TestCa.create('Other CA');
    proxyClientCa = await TestCa.create('Proxy Client CA');
    proxyClient = await proxyClientCa.issue({ commonName: 'edge proxy', client: true });
  });

  after(async () => {
    for (const stop of stops.reverse()) await stop();
  });

  describe('HTTPS to the origin', () => {
    const tlsSettings = (verify?: 'SYSTEM_TRUSTSTORE' | 'CUSTOM_TRUSTSTORE'): ResolvedHttpProxy['attributes']['backend']['tlsSettings'] =>
      verify ? { verifyCertificate: { mode: verify } } : {};

    it('NONE: encrypts without validating (a self-signed origin is accepted)', T, async () => {
      const self = await selfSigned({ commonName: 'self', ipAddresses: [ORIGIN_IP] });
      const o = await origin({ tls: { certPem: self.certificatePem, keyPem: self.privateKeyPem } });
      const url = await proxyTo([o], { attributes: { backend: { tlsSettings: tlsSettings() } }, originTrust: { mode: 'NONE' } });
      const res = await request(`${url}/none`);
      assert.equal(res.status, 200);
      assert.equal((JSON.parse(res.text) as EchoReply).url, '/none');
    });

    it('SYSTEM_TRUSTSTORE: refuses an origin whose CA is not a well-known one (502)', T, async () => {
      const cert = await originCa.issue({ commonName: 'origin', ipAddresses: [ORIGIN_IP] });
      const o = await origin({ tls: { certPem: cert.certificatePem, keyPem: cert.privateKeyPem } });
      const url = await proxyTo([o], {
        attributes: { backend: { tlsSettings: tlsSettings('SYSTEM_TRUSTSTORE') } },
        originTrust: { mode: 'SYSTEM_TRUSTSTORE' },
      });
      const res = await request(`${url}/system`);
      assert.equal(res.status, 502);
      assert.match(res.text, /Support ID: <code>[0-9a-f]{32}<\/code>/);
      assert.equal(o.requests, 0);
      assert.match(log.at(-1)?.upstreamError ?? '', /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|UNABLE_TO_GET_ISSUER/);
    });

    it('CUSTOM_TRUSTSTORE: accepts an origin signed by a given CA, checking the name from Host (SNI)', T, async () => {
      const cert = await originCa.issue({ commonName: 'origin.test', dnsNames: ['origin.test'] });
      const o = await origin({ tls: { certPem: cert.certificatePem, keyPem: cert.privateKeyPem } });
      const url = await proxyTo([o], {
        attributes: { backend: { tlsSettings: tlsSettings('CUSTOM_TRUSTSTORE') } },
        originTrust: { mode: 'CUSTOM_TRUSTSTORE', caPems: [originCa.certificatePem] },
      });
      const named = await request(`${url}/custom`, { headers: { host: 'origin.test' } });
      assert.equal(named.status, 200);
      // A request with a body takes the other client (undici): same trust, same name check.
      const posted = await request(`${url}/custom`, { method: 'POST', body: 'payload', headers: { host: 'origin.test' } });
      assert.equal(posted.status, 200);
      assert.equal((JSON.parse(posted.text) as EchoReply).bodyLength, 7);
      assert.equal((await request(`${url}/custom`, { method: 'POST', body: 'payload', headers: { host: 'elsewhere.test' } })).status, 502);
      const wrongName = await request(`${url}/custom`, { headers: { host: 'elsewhere.test' } });
      assert.equal(wrongName.status, 502, 'the certificate must name the host');
    });

    it('CUSTOM_TRUSTSTORE: refuses an origin signed by another CA (502)', T, async () => {
      const cert = await otherCa.issue({ commonName: 'origin', ipAddresses: [ORIGIN_IP] });
      const o = await origin({ tls: { certPem: cert.certificatePem, keyPem: cert.privateKeyPem } });
      const url = await proxyTo([o], {
        attributes: { backend: { tlsSettings: tlsSettings('CUSTOM_TRUSTSTORE') } },
        originTrust: { mode: 'CUSTOM_TRUSTSTORE', caPems: [originCa.certificatePem] },
      });
      assert.equal((await request(`${url}/`)).status, 502);
      assert.equal(o.requests, 0);
    });

    for (const variant of ['NONE', 'CUSTOM_TRUSTSTORE'] as const) {
      it(`presents the proxy's client certificate to an origin that requires one (${variant})`, T, async () => {
        const cert = await originCa.issue({ commonName: 'origin', ipAddresses: [ORIGIN_IP] });
        const o = await origin({
          tls: { certPem: cert.certificatePem, keyPem: cert.privateKeyPem, caPem: proxyClientCa.certificatePem, requestCert: true },
        });
        const trust: ResolvedHttpProxy['originTrust'] =
          variant === 'NONE' ? { mode: 'NONE' } : { mode: 'CUSTOM_TRUSTSTORE', caPems: [originCa.certificatePem] };
        const backend = {
          tlsSettings: {
            clientCertificateId: '00000000-0000-4000-8000-0000000000c1',
            ...tlsSettings(variant === 'NONE' ? undefined : variant),
          },
        };
        const withCert = await proxyTo([o], {
          attributes: { backend },
          originTrust: trust,
          originClientCertificate: { certificatePem: proxyClient.certificatePem, privateKeyPem: proxyClient.privateKeyPem },
        });
        const res = await request(`${withCert}/mtls`);
        assert.equal(res.status, 200);
        assert.equal((JSON.parse(res.text) as EchoReply).peerCertificateFingerprint, proxyClient.fingerprintHex);
        const withoutCert = await proxyTo([o], { attributes: { backend }, originTrust: trust });
        assert.equal((await request(`${withoutCert}/mtls`)).status, 502);
      });
    }

    it('SYSTEM_TRUSTSTORE with the proxy client certificate: still refuses an untrusted origin', T, async () => {
      const cert = await originCa.issue({ commonName: 'origin', ipAddresses: [ORIGIN_IP] });
      const o = await origin({
        tls: { certPem: cert.certificatePem, keyPem: cert.privateKeyPem, caPem: proxyClientCa.certificatePem, requestCert: true },
      });
      const url = await proxyTo([o], {
        attributes: {
          backend: {
            tlsSettings: { clientCertificateId: '00000000-0000-4000-8000-0000000000c1', verifyCertificate: { mode: 'SYSTEM_TRUSTSTORE' } },
          },
        },
        originTrust: { mode: 'SYSTEM_TRUSTSTORE' },
        originClientCertificate: { certificatePem: proxyClient.certificatePem, privateKeyPem: proxyClient.privateKeyPem },
      });
      assert.equal((await request(`${url}/`)).status, 502);
      assert.equal(o.requests, 0);
    });
  });

  describe('fail-over and failure pages', () => {
    it('skips an origin that refuses connections and marks it down', T, async () => {
      const live = await origin({ host: ORIGIN_IP_2, name: 'live' });
      const dead = { host: ORIGIN_IP, port: await freePort(ORIGIN_IP) };
      const url = await proxyTo([dead, live], { attributes: { backend: { deliveryMethod: 'ROUND_ROBIN' } } });
      for (let i = 0; i < 4; i++) {
        const res = await request(`${url}/${i}`);
        assert.equal(res.status, 200);
        assert.equal((JSON.parse(res.text) as EchoReply).origin, 'live');
      }
      const attempts = log.slice(-4).map((e) => e.upstreamAttempts);
      assert.equal(attempts[0], 2, 'the first request tried the dead host, then the live one');
      assert.deepEqual(attempts.slice(1), [1, 1, 1], 'then the dead host was skipped');
    });

    it('retries even a streamed POST when the connect failed (nothing was sent)', T, async () => {
      const live = await origin({ host: ORIGIN_IP_2, name: 'live' });
      const dead = { host: ORIGIN_IP, port: await freePort(ORIGIN_IP) };
      const url = await proxyTo([dead, live], { attributes: { backend: { deliveryMethod: 'ROUND_ROBIN' } } });
      const res = await request(`${url}/upload`, { method: 'POST', body: Readable.from([Buffer.from('streamed '), Buffer.from('body')]) });
      assert.equal(res.status, 200);
      assert.equal((JSON.parse(res.text) as EchoReply).bodyLength, 13);
    });

    it('retries an idempotent request after a broken connection, but never a POST', T, async () => {
      const breaking = await origin({ name: 'breaking', handler: (req) => req.socket.destroy() });
      const live = await origin({ host: ORIGIN_IP_2, name: 'live' });
      const url = await proxyTo([breaking, live], { attributes: { backend: { deliveryMethod: 'ROUND_ROBIN' } } });
      const get = await request(`${url}/get`);
      assert.equal(get.status, 200);
      assert.equal((JSON.parse(get.text) as EchoReply).origin, 'live');
      const livedBefore = live.requests;
      // Round robin: the POST goes to the breaking origin first.
      const post = await request(`${url}/post`, { method: 'POST', body: 'pay once' });
      assert.equal(post.status, 502);
      assert.equal(live.requests, livedBefore, 'the POST was not sent a second time');
    });

    it('answers 502 with our page when no origin answers', T, async () => {
      const url = await proxyTo([
        { host: ORIGIN_IP, port: await freePort(ORIGIN_IP) },
        { host: ORIGIN_IP_2, port: await freePort(ORIGIN_IP_2) },
      ]);
      const res = await request(`${url}/`);
      assert.equal(res.status, 502);
      assert.equal(res.headers['content-type'], 'text/html; charset=utf-8');
      const supportId = /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(res.text)?.[1];
      assert.ok(supportId);
      const entry = log.find((e) => e.supportId === supportId);
      assert.equal(entry?.upstreamError, 'ECONNREFUSED');
      assert.equal(entry?.upstreamAttempts, 2);
    });

    it('never connects to an origin the origin policy refuses: the next host answers, else 502', T, async () => {
      // Stored before the operator narrowed the policy: the literal address is checked again at connect.
      const refused = await origin({ name: 'refused' });
      const live = await origin({ host: ORIGIN_IP_2, name: 'live' });
      const { guard, refusals } = recordingOriginGuard({ allowedNetworks: [`${ORIGIN_IP_2}/32`] });
      const both = await proxyTo([refused, live], { attributes: { backend: { deliveryMethod: 'ROUND_ROBIN' } } }, {}, guard);
      assert.equal(JSON.parse((await request(`${both}/get`)).text).origin, 'live');
      const streamed = await request(`${both}/upload`, {
        method: 'POST',
        body: Readable.from([Buffer.from('streamed '), Buffer.from('body')]),
      });
      assert.equal(JSON.parse(streamed.text).origin, 'live');

      const only = await proxyTo([refused], {}, {}, guard);
      const res = await request(`${only}/`);
      assert.equal(res.status, 502);
      const supportId = /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(res.text)?.[1];
      assert.equal(log.find((e) => e.supportId === supportId)?.upstreamError, 'TPS_ORIGIN_REFUSED');
      assert.equal((await request(`${only}/upload`, { method: 'POST', body: Readable.from([Buffer.from('streamed')]) })).status, 502);
      assert.equal(refused.requests, 0, 'the refused origin saw no request');
      assert.ok(
        refusals.length >= 2 && refusals.every((r) => r.address === ORIGIN_IP && r.reason === 'loopback'),
        JSON.stringify(refusals),
      );
    });

    it('answers 504 when the origin does not send its response head in time', T, async () => {
      const silent = await origin({ handler: () => {} });
      const url = await proxyTo([silent], {}, { upstreamHeadersTimeoutMs: 300 });
      const res = await request(`${url}/slow`);
      assert.equal(res.status, 504);
      assert.match(res.text, /Gateway timeout/);
    });
  });
});
