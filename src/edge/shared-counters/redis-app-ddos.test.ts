/**
 * The app-ddos detector across two edge nodes through a real Redis (Debian's redis-server, started
 * here on a loopback port): each node alone stays under the proxy's threshold, together they are
 * over it, and both nodes declare the attack.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { freePort } from '../../../test/support/ports.ts';
import { waitFor } from '../../../test/support/wait.ts';
import { AttackDetector, createAppDdosTables } from '../http/app-ddos/detector.ts';
import { RedisClusterRate } from './redis-app-ddos.ts';

describe('app-ddos detection across nodes (Redis)', () => {
  let server: ChildProcess;
  let redis: Redis;

  before(async () => {
    const port = await freePort('127.0.0.1');
    server = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    redis = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 1 });
    // Refused connects while the server starts are expected here.
    redis.on('error', () => {});
    await waitFor('redis-server', async () => {
      try {
        await redis.connect();
        return true;
      } catch {
        redis.disconnect();
        return false;
      }
    });
  });
  after(() => {
    redis?.disconnect();
    server?.kill();
  });

  it('declares an attack that only the nodes together are over', async () => {
    const proxyId = `proxy-${Date.now()}`;
    const policy = { threshold: 30, factor: 4, minRate: 50, baselineHalfLifeSeconds: 600, quietSeconds: 3 };
    // Two nodes: tables of their own, one exchange each (the same Redis).
    const nodes = [0, 1].map(() => ({
      detector: new AttackDetector(createAppDdosTables(16), policy),
      exchange: new RedisClusterRate(redis),
    }));
    const start = 3_000_000_000_000;
    let started = [0, 0];
    for (let second = 0; second < 8; second++) {
      for (const [index, node] of nodes.entries()) {
        // 20 requests a second on each node: under 30 alone.
        for (let i = 0; i < 20; i++) {
          const state = node.detector.count(start + second * 1000 + i * 10);
          if (state.attackStart > 0 && started[index] === 0)
            started = started.map((value, at) => (at === index ? state.attackStart : value));
        }
        const closed = node.detector.takeClosed();
        if (closed !== undefined) {
          node.detector.setClusterRate(closed.second - 1, await node.exchange.exchange(proxyId, closed.second, closed.count));
        }
      }
    }
    assert.ok(started[0]! > 0 && started[1]! > 0, `both nodes declared the attack: ${started}`);
    // Without the exchange, a node alone never does.
    const alone = new AttackDetector(createAppDdosTables(16), policy);
    for (let second = 0; second < 8; second++) {
      for (let i = 0; i < 20; i++) assert.equal(alone.count(start + second * 1000 + i * 10).attackStart, 0);
    }
  });
});
