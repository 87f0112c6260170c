/**
 * ACME HTTP-01 challenges are answered by the proxy itself, before geo fencing and rate limits: a
 * CA's validation servers are anywhere in the world and must never be refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { HttpProxy } from '../http-proxy.ts';
import { request } from '../../../../test/support/http-client.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../../test/support/http-servers.ts';

const DE = '127.0.0.20';

describe('acme challenge phase', () => {
  let origin: TestOrigin;
  let proxy: HttpProxy;
  let url = '';
  const asked: { token: string; host: string; tenantId: string }[] = [];

  before(async () => {
    origin = await startOrigin();
    const port = await freePort(FRONT_IP);
    proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: {
          geoFencing: { mode: 'ALLOW_LISTED', countries: ['US'] },
          rateLimiting: { thresholds: [{ requests: 1, periodSeconds: 60 }], blockSeconds: 60 },
        },
      }),
      testDeps({
        acmeChallenge: async (token, host, tenantId) => {
          asked.push({ token, host, tenantId });
          return token === 'tok_EN-123' ? `${token}.thumbprint` : undefined;
        },
      }),
    );
    await proxy.start();
    url = `http://${FRONT_IP}:${port}`;
  });
  after(async () => {
    await proxy.stop();
    await origin.close();
  });

  it('answers a known token with its key authorization, before the geo fence and the rate limit', { timeout: 20_000 }, async () => {
    for (let i = 0; i < 5; i++) {
      const res = await request(`${url}/.well-known/acme-challenge/tok_EN-123`, { localAddress: DE, headers: { host: 'Shop.Example:80' } });
      assert.equal(res.status, 200);
      assert.equal(res.text, 'tok_EN-123.thumbprint');
    }
    assert.deepEqual(
      asked[0],
      { token: 'tok_EN-123', host: 'shop.example', tenantId: proxy.config.tenantId },
      "asked with the proxy's tenant",
    );
    assert.equal(origin.requests, 0);
    assert.equal((await request(`${url}/`, { localAddress: DE })).status, 403, 'other paths are still fenced');
  });

  it('answers 404 for an unknown or malformed token instead of asking the origin', { timeout: 20_000 }, async () => {
    assert.equal((await request(`${url}/.well-known/acme-challenge/unknown`, { localAddress: DE })).status, 404);
    assert.equal((await request(`${url}/.well-known/acme-challenge/bad~token`, { localAddress: DE })).status, 404);
    // An encoded slash is ambiguous: refused before the challenge phase (request-target.ts).
    assert.equal((await request(`${url}/.well-known/acme-challenge/bad%2Ftoken`, { localAddress: DE })).status, 400);
    assert.equal(origin.requests, 0);
  });
});
