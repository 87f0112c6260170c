/**
 * Rate limiting over real sockets: 429 with Retry-After and the page, one APP_DDOS_ATTACK event per
 * client and episode with the page's support id, recovery after blockSeconds, and keys that headers
 * cannot change; and what the node's failure mode does when the shared counters do not answer.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import type { AppDdosAttackEvent } from '@tps/model';
import { HttpProxy } from '../http-proxy.ts';
import { request } from '../../../../test/support/http-client.ts';
import { FRONT_IP, freePort, resolvedProxy, startOrigin, testDeps, type TestOrigin } from '../../../../test/support/http-servers.ts';
import { MemoryRateLimitStore, type RateLimitStore } from '../../limits/rate-store.ts';
import { FailoverRateLimitStore, StoreCircuit, type RateLimitStoreFailureMode } from '../../limits/store-failover.ts';

const CLIENT = '127.0.0.21';
const OTHER = '127.0.0.22';

describe('rate limit phase', () => {
  let origin: TestOrigin;
  let proxy: HttpProxy;
  let url = '';
  let port = 0;
  const deps = testDeps({ rateLimit: { updateIntervalMs: 50 } });

  before(async () => {
    origin = await startOrigin();
    port = await freePort(FRONT_IP);
    proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: { rateLimiting: { thresholds: [{ requests: 3, periodSeconds: 60 }], blockSeconds: 1 } },
      }),
      deps,
    );
    await proxy.start();
    url = `http://${FRONT_IP}:${port}`;
  });
  after(async () => {
    await proxy.stop();
    await origin.close();
  });

  it('answers 429 over the threshold, records one event per episode, and lets the client back after blockSeconds', {
    timeout: 20_000,
  }, async () => {
    for (let i = 0; i < 3; i++) assert.equal((await request(`${url}/ok/${i}`, { localAddress: CLIENT })).status, 200);
    const blocked = await request(`${url}/login?user=x`, {
      localAddress: CLIENT,
      headers: { 'user-agent': 'flood/1.0', cookie: 'session=secret' },
    });
    assert.equal(blocked.status, 429);
    assert.equal(blocked.headers['retry-after'], '1');
    assert.match(blocked.text, /Too many requests/);
    const supportId = /Support ID: <code>([0-9a-f]{32})<\/code>/.exec(blocked.text)?.[1];
    assert.ok(supportId);

    // Spoofed forwarding headers change nothing: the key is the socket peer.
    const spoofed = await request(`${url}/`, { localAddress: CLIENT, headers: { 'x-forwarded-for': '203.0.113.50' } });
    assert.equal(spoofed.status, 429);
    assert.match(spoofed.text, new RegExp(`Support ID: <code>${supportId}</code>`), 'every 429 of the episode shows its support id');
    assert.equal((await request(`${url}/`, { localAddress: OTHER })).status, 200, 'another client is not affected');

    const events = deps.insight.events.filter((e): e is AppDdosAttackEvent => e.type === 'APP_DDOS_ATTACK');
    assert.equal(events.length, 1, 'one event for the episode, not one per refused request');
    const event = events[0]!;
    assert.match(event.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(event.supportId, supportId);
    assert.equal(event.action, 'BLOCKED');
    assert.deepEqual(event.rules, []);
    assert.equal(event.tenantId, '00000000-0000-4000-8000-0000000000aa');
    assert.equal(event.trafficConfigId, '00000000-0000-4000-8000-000000000001');
    assert.equal(event.tpc, 'TST');
    assert.equal(event.destinationIp, FRONT_IP);
    assert.equal(event.source.ip, CLIENT);
    assert.equal(event.source.countryCode, 'US');
    assert.ok(event.source.port > 0);
    assert.match(event.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.equal(event.request.method, 'GET');
    assert.equal(event.request.path, '/login');
    assert.equal(event.request.statusCode, 429);
    assert.ok(event.request.headers.includes('user-agent: flood/1.0'));
    assert.ok(event.request.headers.includes('cookie: [redacted]'), 'credentials stay out of events');
    assert.equal(event.request.messageHeader.split('\n')[0], 'GET /login?user=x HTTP/1.1');
    assert.deepEqual(event.rateLimit.threshold, { requests: 3, periodSeconds: 60 });
    assert.equal(event.rateLimit.observedRequests, 4);
    assert.equal(event.rateLimit.blockSeconds, 1);
    assert.equal(event.rateLimit.blockedRequests, 1);
    assert.ok(Date.parse(event.rateLimit.blockedUntil) > Date.parse(event.rateLimit.firstBlockedAt));

    // Recovery: poll (bounded) until the block is over.
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      status = (await request(`${url}/again`, { localAddress: CLIENT })).status;
    }
    assert.equal(status, 200, 'the client is let through again after blockSeconds');
    // The episode's counters reached the sink as updates of the same event.
    const updates = deps.insight.updates.filter((u) => u.eventId === event.id);
    assert.ok(updates.length >= 1);
    assert.ok(updates.at(-1)!.update.blockedRequests >= 2);
  });
});

/** A shared counter store that does not answer (Redis down or stalled: every command fails). */
const unreachableStore: RateLimitStore = {
  hit: () => Promise.reject(new Error('Connection is closed.')),
  block: () => Promise.reject(new Error('Connection is closed.')),
  size: 0,
};

describe('rate limit phase, the shared counters not answering', () => {
  let origin: TestOrigin;
  before(async () => {
    origin = await startOrigin();
  });
  after(async () => {
    await origin.close();
  });

  async function proxyWith(t: TestContext, mode: RateLimitStoreFailureMode): Promise<{ url: string; decided: string[] }> {
    const decided: string[] = [];
    const circuit = new StoreCircuit();
    const deps = testDeps({
      rateLimit: {
        createStore: (policy) => {
          const periods = policy.thresholds.map((threshold) => threshold.periodSeconds * 1000);
          return new FailoverRateLimitStore(unreachableStore, new MemoryRateLimitStore(periods), {
            mode,
            periods: periods.length,
            circuit,
            onDecided: (m) => decided.push(m),
            onLog: () => {},
          });
        },
      },
    });
    const port = await freePort(FRONT_IP);
    const proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: { rateLimiting: { thresholds: [{ requests: 3, periodSeconds: 60 }], blockSeconds: 60 } },
      }),
      deps,
    );
    await proxy.start();
    t.after(() => proxy.stop());
    return { url: `http://${FRONT_IP}:${port}`, decided };
  }

  it('local: the node counts alone; over the limit 429, under it served', async (t) => {
    const { url, decided } = await proxyWith(t, 'local');
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await request(`${url}/${i}`, { localAddress: CLIENT })).status);
    assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
    assert.equal((await request(`${url}/`, { localAddress: OTHER })).status, 200);
    // The 5th request is refused from the episode the 4th started, before any counting (early refusal).
    assert.deepEqual(decided, Array(5).fill('local'));
  });

  it('closed: 503 with the page and Retry-After', async (t) => {
    const { url, decided } = await proxyWith(t, 'closed');
    const refused = await request(`${url}/`, { localAddress: CLIENT });
    assert.equal(refused.status, 503);
    assert.equal(refused.headers['retry-after'], '5');
    assert.match(refused.text, /request limits of this site could not be checked/);
    assert.match(refused.text, /Support ID: <code>[0-9a-f]{32}<\/code>/);
    assert.deepEqual(decided, ['closed']);
  });

  it('open: through, counted', async (t) => {
    const { url, decided } = await proxyWith(t, 'open');
    for (let i = 0; i < 5; i++) assert.equal((await request(`${url}/${i}`, { localAddress: CLIENT })).status, 200);
    assert.deepEqual(decided, Array(5).fill('open'));
  });

  it('a limiter that fails for any other reason refuses (503), never lets through', async (t) => {
    const deps = testDeps({ rateLimit: { createStore: () => unreachableStore } });
    const port = await freePort(FRONT_IP);
    const proxy = new HttpProxy(
      resolvedProxy(port, [origin], {
        attributes: { rateLimiting: { thresholds: [{ requests: 3, periodSeconds: 60 }], blockSeconds: 60 } },
      }),
      deps,
    );
    await proxy.start();
    t.after(() => proxy.stop());
    assert.equal((await request(`http://${FRONT_IP}:${port}/`, { localAddress: CLIENT })).status, 503);
  });
});
