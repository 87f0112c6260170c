import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FloodLimiter, SourceSlot, type FloodLimitSettings } from './flood-limits.ts';

const generous: FloodLimitSettings = { maxConnectionsPerSource: 1000, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 100_000 };

function fakeClock(): { now: () => number; advance: (ms: number) => void } {
  let time = 0;
  return { now: () => time, advance: (ms) => (time += ms) };
}

function admitted(result: SourceSlot | string): SourceSlot {
  assert.ok(result instanceof SourceSlot, `refused: ${String(result)}`);
  return result;
}

describe('FloodLimiter', () => {
  it('caps the connections one source has open at once', () => {
    const limiter = new FloodLimiter({ ...generous, maxConnectionsPerSource: 2 });
    const first = admitted(limiter.acquire('192.0.2.1'));
    admitted(limiter.acquire('192.0.2.1'));
    assert.equal(limiter.acquire('192.0.2.1'), 'SOURCE_CONNECTIONS');
    admitted(limiter.acquire('192.0.2.2'));
    limiter.release(first);
    admitted(limiter.acquire('192.0.2.1'));
    assert.equal(limiter.refused.SOURCE_CONNECTIONS, 1);
    assert.equal(limiter.connections, 3);
  });

  it('counts an IPv4-mapped IPv6 source as its IPv4 address', () => {
    const limiter = new FloodLimiter({ ...generous, maxConnectionsPerSource: 1 });
    admitted(limiter.acquire('192.0.2.1'));
    assert.equal(limiter.acquire('::ffff:192.0.2.1'), 'SOURCE_CONNECTIONS');
  });

  it('caps the proxy as a whole', () => {
    const limiter = new FloodLimiter({ ...generous, maxConnections: 3 });
    const slots = ['192.0.2.1', '192.0.2.2', '192.0.2.3'].map((ip) => admitted(limiter.acquire(ip)));
    assert.equal(limiter.acquire('192.0.2.4'), 'GLOBAL_CONNECTIONS');
    limiter.release(slots[0]!);
    admitted(limiter.acquire('192.0.2.4'));
    assert.equal(limiter.refused.GLOBAL_CONNECTIONS, 1);
  });

  it('caps new connections per second per source with a sliding window', () => {
    const clock = fakeClock();
    const limiter = new FloodLimiter({ ...generous, maxNewConnectionsPerSecondPerSource: 10 }, { now: clock.now });
    const open = (ip: string) => {
      const result = limiter.acquire(ip);
      if (result instanceof SourceSlot) limiter.release(result);
      return result instanceof SourceSlot;
    };
    for (let i = 0; i < 10; i++) assert.ok(open('192.0.2.1'), `connection ${i}`);
    assert.equal(open('192.0.2.1'), false);
    assert.ok(open('192.0.2.2'), 'another source has its own window');
    // Half way through the next second, half of the previous second still counts: 5 more fit.
    clock.advance(1500);
    let admittedCount = 0;
    while (open('192.0.2.1')) admittedCount++;
    assert.equal(admittedCount, 5);
    // After two quiet seconds the window is empty again.
    clock.advance(2000);
    for (let i = 0; i < 10; i++) assert.ok(open('192.0.2.1'));
    assert.equal(limiter.refused.SOURCE_RATE, 2);
  });

  it('applies new caps to the next connection without cutting open ones', () => {
    const limiter = new FloodLimiter({ ...generous, maxConnectionsPerSource: 5 });
    for (let i = 0; i < 4; i++) admitted(limiter.acquire('192.0.2.1'));
    limiter.configure({ ...generous, maxConnectionsPerSource: 2 });
    assert.equal(limiter.acquire('192.0.2.1'), 'SOURCE_CONNECTIONS');
    assert.equal(limiter.connections, 4);
  });

  it('releasing twice is harmless', () => {
    const limiter = new FloodLimiter(generous);
    const slot = admitted(limiter.acquire('192.0.2.1'));
    limiter.release(slot);
    limiter.release(slot);
    assert.equal(limiter.connections, 0);
  });

  it('stays bounded under a million distinct sources', () => {
    const limiter = new FloodLimiter(generous, { maxIdleSources: 10_000 });
    const held: SourceSlot[] = [];
    for (let i = 0; i < 1_000_000; i++) {
      const ip = `10.${(i >>> 16) & 255}.${(i >>> 8) & 255}.${i & 255}`;
      const slot = admitted(limiter.acquire(ip));
      // A few stay open; they are never evicted.
      if (i % 100_000 === 0) held.push(slot);
      else limiter.release(slot);
    }
    assert.equal(limiter.connections, held.length);
    assert.ok(limiter.trackedSources <= 10_000 + held.length, `tracked ${limiter.trackedSources}`);
    // An open connection's source still counts against its per-source cap.
    limiter.configure({ ...generous, maxConnectionsPerSource: 1 });
    assert.equal(limiter.acquire('10.0.0.0'), 'SOURCE_CONNECTIONS');
  });
});
