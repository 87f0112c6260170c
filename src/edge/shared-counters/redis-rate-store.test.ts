/**
 * Rate-limit counters in a real Redis (Debian's redis-server, started here on a loopback port):
 * two edge nodes counting one client see the same numbers, and a block set by one holds in the other.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { RedisRateLimitStore } from './redis-rate-store.ts';
import { freePort } from '../../../test/support/ports.ts';
import { waitFor } from '../../../test/support/wait.ts';

describe('Redis rate-limit store', () => {
  let server: ChildProcess;
  let nodeA: Redis;
  let nodeB: Redis;

  before(async () => {
    const port = await freePort('127.0.0.1');
    server = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    nodeA = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
    nodeB = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
    // Refused connects while the server starts are expected here.
    nodeA.on('error', () => {});
    await waitFor('redis-server', async () => {
      try {
        await nodeA.connect();
        return true;
      } catch {
        nodeA.disconnect();
        return false;
      }
    });
    await nodeB.connect();
  });
  after(() => {
    nodeA.disconnect();
    nodeB.disconnect();
    server.kill();
  });

  it('counts one client across nodes, per proxy, and shares blocks', async () => {
    const first = new RedisRateLimitStore(nodeA, 'proxy-a', [1000, 60_000]);
    const second = new RedisRateLimitStore(nodeB, 'proxy-a', [1000, 60_000]);
    const otherProxy = new RedisRateLimitStore(nodeB, 'proxy-b', [1000]);
    const now = 1_700_000_000_000;
    for (let i = 0; i < 5; i++) await first.hit('127.0.0.9', now + i);
    const seen = await second.hit('127.0.0.9', now + 10);
    assert.deepEqual(seen.estimates, [6, 6]);
    assert.deepEqual((await otherProxy.hit('127.0.0.9', now + 10)).estimates, [1]);
    await second.block('127.0.0.9', now + 5_000);
    assert.equal((await first.hit('127.0.0.9', now + 20)).blockedUntil, now + 5_000);
    assert.equal((await first.hit('127.0.0.9', now + 6_000)).estimates[0], 1, 'after the block the client starts afresh');
  });

  it("keeps each proxy within its own share: a flood of sources on one proxy leaves another proxy's counters and blocks", async () => {
    const calm = new RedisRateLimitStore(nodeA, 'calm-proxy', [3_600_000], { maxClients: 100 });
    const flooded = new RedisRateLimitStore(nodeB, 'flooded-proxy', [3_600_000], { maxClients: 100 });
    const now = 1_700_000_000_000;
    await calm.block('203.0.113.9', now + 600_000);
    for (let i = 0; i < 3; i++) await calm.hit('198.51.100.1', now + i);
    for (let i = 0; i < 1_000; i++) await flooded.hit(`10.0.${i >> 8}.${i & 255}`, now + 10 + i);
    assert.equal((await calm.hit('203.0.113.9', now + 5_000)).blockedUntil, now + 600_000, 'the block holds');
    assert.equal((await calm.hit('198.51.100.1', now + 5_000)).estimates[0], 4, 'the counts are intact');
    assert.equal(await nodeA.zcard('tps:rl:{flooded-proxy}'), 100, 'the flooded proxy holds its share, no more');
    const firstSource = await nodeA.exists('tps:rl:{flooded-proxy}:10.0.0.0');
    assert.equal(firstSource, 0, 'its oldest sources went first');
  });
});
