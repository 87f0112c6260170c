/**
 * The shared counter table: exact counts under concurrent updates from several threads, bounded
 * memory under millions of distinct keys, and a rate-limit store that counts one client's requests
 * the same whichever worker sees them.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import { SharedTable, hash64 } from './shared-table.ts';
import { SharedRateLimitStore, createRateTable } from './shared-rate-store.ts';

const TABLE_MODULE = new URL('./shared-table.ts', import.meta.url).href;

/** Runs `increments` updates of `key` in a worker thread on the same table. */
function incrementInWorker(table: SharedTable, key: string, increments: number): Promise<void> {
  const source = `
    const { workerData, parentPort } = require('node:worker_threads');
    import(workerData.module).then(({ SharedTable }) => {
      const table = new SharedTable(workerData.init);
      for (let i = 0; i < workerData.increments; i++) {
        table.update(workerData.key, 1, (words, offset) => { words[offset] += 1; });
      }
      parentPort.postMessage('done');
    });`;
  return new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { module: TABLE_MODULE, init: table.init, key, increments } });
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
}

const read = (table: SharedTable, key: string) => table.update(key, 1, (words, offset) => words[offset]!);

describe('shared counter table', () => {
  it('keeps exact counts when several threads update the same key at once', async () => {
    const table = SharedTable.create(1024, 1);
    await Promise.all([
      incrementInWorker(table, 'client', 50_000),
      incrementInWorker(table, 'client', 50_000),
      incrementInWorker(table, 'other', 10_000),
    ]);
    assert.equal(read(table, 'client'), 100_000);
    assert.equal(read(table, 'other'), 10_000);
  });

  it('stays within its slots under a million distinct keys, keeping keys in active use', async () => {
    const table = SharedTable.create(4096, 1);
    for (let i = 0; i < 1_000_000; i++) {
      table.update(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, 1 + Math.floor(i / 1000), (words, offset) => {
        words[offset] = 1;
      });
      // A client that keeps coming back is touched last, so eviction takes the one-off sources.
      if (i % 100 === 0) table.update('regular client', 1 + Math.floor(i / 1000), (words, offset) => void (words[offset]! += 1));
    }
    assert.ok(table.used <= 4096);
    assert.equal(read(table, 'regular client'), 10_000);
  });

  it('hashes keys to 64 bits, never to the free-slot marker', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 100_000; i++) seen.add(hash64(`key-${i}`).join(':'));
    assert.equal(seen.size, 100_000);
    assert.notDeepEqual(hash64(''), [0, 0]);
  });

  it('gives two rate-limit stores on one table (two workers) the same count for a client', () => {
    const table = createRateTable(1024, 2);
    const first = new SharedRateLimitStore(new SharedTable(table.init), [1000, 60_000]);
    const second = new SharedRateLimitStore(new SharedTable(table.init), [1000, 60_000]);
    const otherProxy = new SharedRateLimitStore(createRateTable(1024, 1), [1000]);
    const now = 1_700_000_000_000;
    for (let i = 0; i < 5; i++) first.hit('127.0.0.9', now + i);
    const seen = second.hit('127.0.0.9', now + 10);
    assert.equal(seen.estimates[0], 6);
    assert.equal(seen.estimates[1], 6);
    assert.equal(otherProxy.hit('127.0.0.9', now + 10).estimates[0], 1, 'proxies count separately');
    second.block('127.0.0.9', now + 5_000);
    assert.equal(first.hit('127.0.0.9', now + 20).blockedUntil, now + 5_000, 'a block set by one worker holds in the other');
    assert.equal(first.hit('127.0.0.9', now + 6_000).estimates[0], 1, 'after the block the client starts afresh');
  });
});

describe('shared flood limiter', () => {
  it('holds the per-source and global caps across limiters sharing one table (two workers)', async () => {
    const { SharedFloodLimiter, createFloodTable } = await import('./shared-flood-limiter.ts');
    const table = createFloodTable(1024);
    const settings = { maxConnectionsPerSource: 3, maxNewConnectionsPerSecondPerSource: 1000, maxConnections: 5 };
    let now = 1_000_000;
    const clock = { now: () => now };
    const workerA = new SharedFloodLimiter(new SharedTable(table.init), settings, clock);
    const workerB = new SharedFloodLimiter(new SharedTable(table.init), settings, clock);
    const a1 = workerA.acquire('127.0.0.9');
    const b1 = workerB.acquire('127.0.0.9');
    const a2 = workerA.acquire('::ffff:127.0.0.9');
    assert.equal(typeof a1, 'object');
    assert.equal(typeof b1, 'object');
    assert.equal(typeof a2, 'object');
    assert.equal(workerB.acquire('127.0.0.9'), 'SOURCE_CONNECTIONS', 'the fourth connection from one source, on any worker');
    workerB.release(b1 as { sourceKey: string | undefined });
    assert.equal(typeof workerB.acquire('127.0.0.9'), 'object', 'a released slot is free again');
    assert.equal(typeof workerA.acquire('127.0.0.10'), 'object');
    assert.equal(typeof workerB.acquire('127.0.0.11'), 'object');
    assert.equal(workerA.acquire('127.0.0.12'), 'GLOBAL_CONNECTIONS', 'the proxy holds 5 connections in all');

    const rate = { maxConnectionsPerSource: 100, maxNewConnectionsPerSecondPerSource: 4, maxConnections: 100 };
    const otherTable = createFloodTable(1024);
    const rateA = new SharedFloodLimiter(new SharedTable(otherTable.init), rate, clock);
    const rateB = new SharedFloodLimiter(new SharedTable(otherTable.init), rate, clock);
    const outcomes = [rateA, rateB, rateA, rateB, rateA, rateB].map((limiter) => {
      const ticket = limiter.acquire('127.0.0.20');
      if (typeof ticket !== 'string') limiter.release(ticket);
      return typeof ticket === 'string' ? ticket : 'OK';
    });
    assert.deepEqual(outcomes, ['OK', 'OK', 'OK', 'OK', 'SOURCE_RATE', 'SOURCE_RATE']);
    now += 2_500;
    assert.equal(typeof rateB.acquire('127.0.0.20'), 'object', 'admitted again once the source slows down');
  });
});

describe('per-proxy counter tables', () => {
  it("keeps one proxy's blocks and counters whatever a flood of sources does to another proxy", async () => {
    const { ProxyCounterTableSet } = await import('./proxy-tables.ts');
    const tables = new ProxyCounterTableSet({ rateSlots: 256, floodSlots: 256 });
    const hour = 3_600_000;
    const calm = new SharedRateLimitStore(new SharedTable(tables.tablesFor('calm', [hour]).rate!), [hour]);
    const flooded = new SharedRateLimitStore(new SharedTable(tables.tablesFor('flooded', [hour]).rate!), [hour]);
    const now = 1_700_000_000_000;
    calm.block('203.0.113.9', now + 600_000);
    for (let i = 0; i < 3; i++) calm.hit('198.51.100.1', now);
    // 100,000 distinct sources on the other proxy (390 times the slots of a share).
    for (let i = 0; i < 100_000; i++) flooded.hit(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, now + i);
    assert.equal(calm.hit('203.0.113.9', now + 200_000).blockedUntil, now + 600_000, 'the block holds');
    assert.equal(calm.hit('198.51.100.1', now + 200_000).estimates[0], 4, 'the counts are intact');
    assert.ok(flooded.size <= 256);
  });

  it('gives every worker the same table of a proxy, a new rate table when the periods change, and drops those of removed proxies', async () => {
    const { ProxyCounterTableSet } = await import('./proxy-tables.ts');
    const tables = new ProxyCounterTableSet({ rateSlots: 64, floodSlots: 64 });
    const first = tables.tablesFor('p', [1000]);
    const again = tables.tablesFor('p', [1000]);
    assert.equal(again.rate!.buffer, first.rate!.buffer);
    assert.equal(again.flood.buffer, first.flood.buffer);
    const changed = tables.tablesFor('p', [1000, 60_000]);
    assert.notEqual(changed.rate!.buffer, first.rate!.buffer);
    assert.equal(changed.flood.buffer, first.flood.buffer, 'connection caps keep counting across a rate-limit change');
    assert.equal(tables.tablesFor('p', undefined).rate, undefined);
    tables.tablesFor('q', undefined);
    tables.retainOnly(new Set(['q']));
    assert.equal(tables.size, 1);
  });
});
