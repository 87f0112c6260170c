/** The edge's /healthz verdict from what the supervisor knows: errors, applying past the grace, warnings. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { edgeHealth, type HealthInput, type WorkerReport } from './health.ts';
import type { ConfigEntry } from './messages.ts';

// Health reads only the id and version of an entry.
const entry = (id: string, version: string) => ({ config: { id }, version }) as unknown as ConfigEntry;
const reports = (pairs: [string, WorkerReport][]) => new Map(pairs);
const NOW = 1_000_000;
const input = (over: Partial<HealthInput>): HealthInput => ({
  entries: [],
  workerReports: [],
  applyingSince: () => NOW,
  withoutFeed: [],
  threatFeed: undefined,
  kernelWarning: undefined,
  ...over,
});

test('a configuration every worker serves at its version: healthy', () => {
  const active: WorkerReport = { version: 'v2', state: 'ACTIVE', detail: null };
  const health = edgeHealth(
    input({ entries: [entry('a', 'v2')], workerReports: [reports([['a', active]]), reports([['a', active]])] }),
    NOW,
  );
  assert.deepEqual(health, { ok: true, configurations: 1, notServed: [], notServedCount: 0, warnings: [] });
});

test('a worker reporting an error at the current version: not served, with its detail', () => {
  const health = edgeHealth(
    input({
      entries: [entry('a', 'v2')],
      workerReports: [reports([['a', { version: 'v2', state: 'ERROR', detail: 'port in use' }]]), undefined],
    }),
    NOW,
  );
  assert.equal(health.ok, false);
  assert.deepEqual(health.notServed, [{ id: 'a', state: 'ERROR', detail: 'port in use' }]);
});

test('not applied by every worker: healthy within the grace, APPLYING past it', () => {
  const workers = [reports([['a', { version: 'v2', state: 'ACTIVE', detail: null }]]), reports([])];
  const base = { entries: [entry('a', 'v2')], workerReports: workers };
  assert.equal(edgeHealth(input({ ...base, applyingSince: () => NOW - 5_000 }), NOW).ok, true);
  const late = edgeHealth(input({ ...base, applyingSince: () => NOW - 30_000 }), NOW);
  assert.deepEqual(late.notServed, [{ id: 'a', state: 'APPLYING', detail: 'served by 1 of 2 workers for 30 s' }]);
});

test('warnings: threat intelligence without a feed, a feed not read yet, kernel blocking', () => {
  const health = edgeHealth(
    input({ withoutFeed: ['l4'], threatFeed: { report: undefined }, kernelWarning: { code: 'KERNEL_BLOCKING_UNAVAILABLE', detail: 'x' } }),
    NOW,
  );
  assert.equal(health.ok, true);
  assert.deepEqual(
    health.warnings.map((w) => w.code),
    ['NO_THREAT_FEED', 'THREAT_FEED_NOT_LOADED', 'KERNEL_BLOCKING_UNAVAILABLE'],
  );
});

test('rate-limit counters in Redis not answering: a warning saying what the failure mode does, still healthy', () => {
  const active = reports([]);
  const health = edgeHealth(
    input({ workerReports: [active, active], rateLimitStore: { failureMode: 'local', failing: ['Command timed out'] } }),
    NOW,
  );
  assert.equal(health.ok, true);
  assert.equal(health.warnings.length, 1);
  assert.equal(health.warnings[0]!.code, 'RATE_LIMIT_STORE_FAILING');
  assert.match(health.warnings[0]!.detail, /1 of 2 workers \(Command timed out\): rate limits count on this node only/);
  assert.deepEqual(edgeHealth(input({ rateLimitStore: { failureMode: 'local', failing: [] } }), NOW).warnings, []);
});
