/**
 * Geo fencing over real sockets. The test overrides place 127.0.0.20 in DE, 127.0.0.21 in US and
 * 127.0.0.22 in FR; 127.0.0.1 is in no country ("ZZ").
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { HttpProxyAttributes } from '@tps/model';
import { HttpProxy } from '../http-proxy.ts';
import { request } from '../../../../test/support/http-client.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../../test/support/http-servers.ts';

const T = { timeout: 20_000 };
const DE = '127.0.0.20';
const US = '127.0.0.21';
const FR = '127.0.0.22';
const UNKNOWN = '127.0.0.1';

describe('geo fence phase', () => {
  let origin: TestOrigin;
  const proxies: HttpProxy[] = [];

  async function fenced(geoFencing: NonNullable<HttpProxyAttributes['geoFencing']>): Promise<string> {
    const port = await freePort(FRONT_IP);
    const proxy = new HttpProxy(resolvedProxy(port, [origin], { attributes: { geoFencing } }), testDeps());
    await proxy.start();
    proxies.push(proxy);
    return `http://${FRONT_IP}:${port}/`;
  }

  before(async () => {
    origin = await startOrigin();
  });
  after(async () => {
    await Promise.all(proxies.map((p) => p.stop()));
    await origin.close();
  });

  it('BLOCK_LISTED refuses the listed countries with 403 and the block page, and lets others through', T, async () => {
    const url = await fenced({ mode: 'BLOCK_LISTED', countries: ['DE', 'FR'] });
    const before = origin.requests;
    const blocked = await request(url, { localAddress: DE });
    assert.equal(blocked.status, 403);
    assert.match(blocked.text, /not available from your location/);
    assert.match(blocked.text, /Support ID: <code>[0-9a-f]{32}<\/code>/);
    assert.equal((await request(url, { localAddress: FR })).status, 403);
    assert.equal(origin.requests, before, 'blocked requests never reach the origin');
    assert.equal((await request(url, { localAddress: US })).status, 200);
    assert.equal((await request(url, { localAddress: UNKNOWN })).status, 200, 'an unknown country is not listed');
  });

  it('ALLOW_LISTED lets only the listed countries through; an unknown country is refused', T, async () => {
    const url = await fenced({ mode: 'ALLOW_LISTED', countries: ['US'] });
    assert.equal((await request(url, { localAddress: US })).status, 200);
    assert.equal((await request(url, { localAddress: DE })).status, 403);
    assert.equal((await request(url, { localAddress: UNKNOWN })).status, 403);
  });

  it('never takes the country from a header', T, async () => {
    const url = await fenced({ mode: 'ALLOW_LISTED', countries: ['US'] });
    const res = await request(url, { localAddress: DE, headers: { 'x-forwarded-for': '8.8.8.8', 'cf-ipcountry': 'US' } });
    assert.equal(res.status, 403);
  });
});
