import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HostPool, type BackendHost, type PooledHost } from './index.ts';

const threeHosts: BackendHost[] = [
  { address: '10.0.0.1', port: 80 },
  { address: '10.0.0.2', port: 80 },
  { address: '10.0.0.3', port: 80 },
];

function fakeClock(start = 1_000_000): { now: () => number; advance: (ms: number) => void } {
  let time = start;
  return { now: () => time, advance: (ms) => (time += ms) };
}

function clientIps(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `198.51.${(i >> 8) & 255}.${i & 255}`);
}

describe('HostPool', () => {
  it('exposes every host with its index, address and port, none active or down', () => {
    const pool = new HostPool(threeHosts, 'ROUND_ROBIN');
    assert.deepEqual(
      pool.hosts.map((h) => [h.index, h.address, h.port, h.active, h.downUntil]),
      [
        [0, '10.0.0.1', 80, 0, 0],
        [1, '10.0.0.2', 80, 0, 0],
        [2, '10.0.0.3', 80, 0, 0],
      ],
    );
  });

  describe('ROUND_ROBIN', () => {
    it('takes the hosts in turn', () => {
      const pool = new HostPool(threeHosts, 'ROUND_ROBIN');
      const picked = Array.from({ length: 6 }, () => pool.pick('192.0.2.1')!.index);
      assert.deepEqual(picked, [0, 1, 2, 0, 1, 2]);
    });

    it('skips a host marked down until its down time is over', () => {
      const clock = fakeClock();
      const pool = new HostPool(threeHosts, 'ROUND_ROBIN', { downForMs: 5_000, now: clock.now });
      pool.markDown(pool.hosts[1]!);
      assert.deepEqual(
        Array.from({ length: 4 }, () => pool.pick('192.0.2.1')!.index),
        [0, 2, 0, 2],
      );
      clock.advance(5_000);
      assert.deepEqual(
        Array.from({ length: 3 }, () => pool.pick('192.0.2.1')!.index),
        [0, 1, 2],
      );
    });
  });

  describe('LEAST_CONNECTIONS', () => {
    it('sends a new connection to the host with the fewest open ones', () => {
      const pool = new HostPool(threeHosts, 'LEAST_CONNECTIONS');
      const [a, b, c] = pool.hosts as [PooledHost, PooledHost, PooledHost];
      pool.begin(a);
      pool.begin(a);
      pool.begin(b);
      assert.equal(pool.pick('192.0.2.1'), c);
      pool.begin(c);
      pool.begin(c);
      assert.equal(pool.pick('192.0.2.1'), b);
      pool.end(a);
      pool.end(a);
      assert.equal(pool.pick('192.0.2.1'), a);
    });

    it('spreads long-lived connections evenly, equal loads taking turns', () => {
      const pool = new HostPool(threeHosts, 'LEAST_CONNECTIONS');
      for (let i = 0; i < 30; i++) pool.begin(pool.pick('192.0.2.1')!);
      assert.deepEqual(
        pool.hosts.map((h) => h.active),
        [10, 10, 10],
      );
    });

    it('never counts below zero', () => {
      const pool = new HostPool(threeHosts, 'LEAST_CONNECTIONS');
      pool.end(pool.hosts[0]!);
      assert.equal(pool.hosts[0]!.active, 0);
    });
  });

  describe('SOURCE_IP_HASH', () => {
    it('gives a client the same host every time', () => {
      const pool = new HostPool(threeHosts, 'SOURCE_IP_HASH');
      for (const ip of clientIps(200)) {
        const first = pool.pick(ip)!.index;
        for (let i = 0; i < 3; i++) assert.equal(pool.pick(ip)!.index, first);
      }
    });

    it('treats an IPv4-mapped IPv6 client like its IPv4 address', () => {
      const pool = new HostPool(threeHosts, 'SOURCE_IP_HASH');
      for (const ip of clientIps(50)) assert.equal(pool.pick(`::ffff:${ip}`)!.index, pool.pick(ip)!.index);
    });

    it('spreads many clients roughly evenly', () => {
      const pool = new HostPool(threeHosts, 'SOURCE_IP_HASH');
      const counts = [0, 0, 0];
      for (const ip of clientIps(6000)) counts[pool.pick(ip)!.index]!++;
      for (const count of counts) assert.ok(count > 1700 && count < 2300, `uneven spread ${counts.join('/')}`);
    });

    it('moves only the clients of a host that goes down, and moves them back when it is up', () => {
      const clock = fakeClock();
      const pool = new HostPool(threeHosts, 'SOURCE_IP_HASH', { now: clock.now });
      const ips = clientIps(3000);
      const before = ips.map((ip) => pool.pick(ip)!.index);
      pool.markDown(pool.hosts[1]!);
      const during = ips.map((ip) => pool.pick(ip)!.index);
      ips.forEach((_, i) => {
        if (before[i] === 1) assert.notEqual(during[i], 1);
        else assert.equal(during[i], before[i], 'a client of a healthy host moved');
      });
      pool.markUp(pool.hosts[1]!);
      assert.deepEqual(
        ips.map((ip) => pool.pick(ip)!.index),
        before,
      );
    });

    it('keeps a client on its host when the host list is reordered or grows', () => {
      const pool = new HostPool(threeHosts, 'SOURCE_IP_HASH');
      const reordered = new HostPool([threeHosts[2]!, threeHosts[0]!, threeHosts[1]!], 'SOURCE_IP_HASH');
      const grown = new HostPool([...threeHosts, { address: '10.0.0.4', port: 80 }], 'SOURCE_IP_HASH');
      let moved = 0;
      for (const ip of clientIps(2000)) {
        const host = pool.pick(ip)!;
        assert.equal(reordered.pick(ip)!.address, host.address);
        const grownHost = grown.pick(ip)!;
        if (grownHost.address !== host.address) {
          assert.equal(grownHost.address, '10.0.0.4', 'a client moved between two old hosts');
          moved++;
        }
      }
      // About a quarter of the clients belong to the new host.
      assert.ok(moved > 350 && moved < 650, `moved ${moved}`);
    });
  });

  describe('retries and passive health', () => {
    for (const method of ['LEAST_CONNECTIONS', 'ROUND_ROBIN', 'SOURCE_IP_HASH'] as const) {
      it(`${method}: skips hosts already tried, then offers none`, () => {
        const pool = new HostPool(threeHosts, method);
        const tried = new Set<number>();
        for (let i = 0; i < 3; i++) {
          const host = pool.pick('192.0.2.7', tried);
          assert.ok(host);
          assert.ok(!tried.has(host.index));
          tried.add(host.index);
        }
        assert.equal(pool.pick('192.0.2.7', tried), undefined);
      });

      it(`${method}: when every host is down, offers the one that comes back first`, () => {
        const clock = fakeClock();
        const pool = new HostPool(threeHosts, method, { downForMs: 1_000, now: clock.now });
        pool.markDown(pool.hosts[2]!);
        clock.advance(10);
        pool.markDown(pool.hosts[0]!);
        clock.advance(10);
        pool.markDown(pool.hosts[1]!);
        assert.equal(pool.pick('192.0.2.7')!.index, 2);
        assert.equal(pool.pick('192.0.2.7', new Set([2]))!.index, 0);
      });
    }

    it('isDown reports the passive health mark', () => {
      const clock = fakeClock();
      const pool = new HostPool(threeHosts, 'ROUND_ROBIN', { downForMs: 100, now: clock.now });
      const host = pool.hosts[0]!;
      assert.equal(pool.isDown(host), false);
      pool.markDown(host);
      assert.equal(pool.isDown(host), true);
      clock.advance(100);
      assert.equal(pool.isDown(host), false);
    });
  });

  describe('withHosts (live reconfiguration)', () => {
    it('carries open-connection counts and down marks of hosts that stay', () => {
      const clock = fakeClock();
      const pool = new HostPool(threeHosts, 'LEAST_CONNECTIONS', { now: clock.now });
      const [a, b] = pool.hosts as [PooledHost, PooledHost];
      pool.begin(a);
      pool.begin(a);
      pool.markDown(b);
      const next = pool.withHosts([threeHosts[1]!, threeHosts[0]!, { address: '10.0.0.9', port: 81 }], 'ROUND_ROBIN');
      assert.equal(next.method, 'ROUND_ROBIN');
      assert.deepEqual(
        next.hosts.map((h) => [h.index, h.address, h.active, next.isDown(h)]),
        [
          [0, '10.0.0.2', 0, true],
          [1, '10.0.0.1', 2, false],
          [2, '10.0.0.9', 0, false],
        ],
      );
      // A connection begun on the old pool ends there; the new pool sees it end.
      pool.end(a);
      assert.equal(next.hosts[1]!.active, 1);
    });
  });
});
