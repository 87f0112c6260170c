/**
 * Retention and caps of insight events: what the store keeps, whatever a flood sends.
 *
 * - Age: events of days older than `retentionDays` go (whole days, UTC). PostgreSQL drops the day
 *   partitions of events and rule rows; SQLite deletes them in short chunks. The rollups of those
 *   days go too, so the dashboards never count what the export can no longer show.
 * - Size: the events' estimated bytes (insight-body.ts) are kept under `maxBytes` in total and
 *   under `tenantSharePercent` of it per tenant. Past a cap the oldest events go first, and only
 *   those of the tenants holding the most: every tenant may keep up to the level L at which the
 *   tenants' holdings, each cut at L, fill `maxBytes` (max-min fairness). A tenant holding less than
 *   its part never loses an event to another tenant's flood.
 *
 * Every delete is a short transaction of at most CHUNK events (SQLite: the API's writes wait for
 * at most one; PostgreSQL: no long transaction holds back the export, see insight-events.ts), and
 * subtracts exactly the rows it deleted from insight_usage, so several nodes may run this at once.
 */
import type { Db, Queryable } from './db.ts';
import { addUsage } from './insight-events.ts';

export interface InsightLimits {
  retentionDays: number;
  maxBytes: number;
  /** The most one tenant may hold, in percent of maxBytes. */
  tenantSharePercent: number;
}

export interface RetentionReport {
  /** Events removed because of their age. */
  expired: number;
  /** Events removed because of a cap. */
  evicted: number;
  /** Partitions dropped (PostgreSQL). */
  droppedPartitions: number;
  /** What the store holds afterwards. */
  storedEvents: number;
  storedBytes: number;
}

const CHUNK = 250;
/** A cap evicts down to this share of it, so that the next events do not evict again at once. */
const EVICT_TO = 0.95;
const DAY_MS = 86_400_000;

/** The first day (days since 1970-01-01) kept with this retention. */
export function firstKeptDay(now: number, retentionDays: number): number {
  return Math.floor((now - retentionDays * DAY_MS) / DAY_MS);
}

/** The bytes each tenant may keep: its holdings cut at the tenant cap, then at the max-min fair level. */
export function tenantTargets(
  usage: ReadonlyMap<string, number>,
  limits: Pick<InsightLimits, 'maxBytes' | 'tenantSharePercent'>,
): Map<string, number> {
  const tenantCap = Math.floor((limits.maxBytes * limits.tenantSharePercent) / 100);
  const capped = [...usage.entries()].map(([tenant, bytes]) => [tenant, Math.max(0, Math.min(bytes, tenantCap))] as const);
  const total = capped.reduce((sum, [, bytes]) => sum + bytes, 0);
  let level = Number.POSITIVE_INFINITY;
  if (total > limits.maxBytes) {
    // Water filling: the smallest holdings fit whole, the rest share what is left equally.
    const sorted = capped.map(([, bytes]) => bytes).sort((a, b) => a - b);
    let left = limits.maxBytes;
    for (let index = 0; index < sorted.length; index++) {
      const share = left / (sorted.length - index);
      if (sorted[index]! >= share) {
        level = Math.floor(share);
        break;
      }
      left -= sorted[index]!;
    }
  }
  return new Map(capped.map(([tenant, bytes]) => [tenant, Math.min(bytes, level)]));
}

export async function enforceInsightRetention(db: Db, limits: InsightLimits, now = Date.now()): Promise<RetentionReport> {
  const report: RetentionReport = { expired: 0, evicted: 0, droppedPartitions: 0, storedEvents: 0, storedBytes: 0 };
  const keepFrom = firstKeptDay(now, limits.retentionDays);
  if (db.dialect === 'postgres') await dropExpiredPartitions(db, keepFrom, report);
  else await deleteExpiredEvents(db, keepFrom, report);
  await deleteExpiredRollups(db, keepFrom);
  await foldUsage(db);

  const usage = await tenantUsage(db);
  const targets = tenantTargets(new Map([...usage].map(([tenant, held]) => [tenant, held.bytes])), limits);
  for (const [tenant, held] of usage) {
    const target = targets.get(tenant) ?? 0;
    if (held.bytes <= target) continue;
    const goal = Math.floor(target * EVICT_TO);
    let bytes = held.bytes;
    while (bytes > goal) {
      const deleted = await deleteOldest(db, tenant);
      if (deleted.events === 0) break;
      bytes -= deleted.bytes;
      report.evicted += deleted.events;
    }
  }
  for (const held of (await tenantUsage(db)).values()) {
    report.storedEvents += held.events;
    report.storedBytes += held.bytes;
  }
  return report;
}

/** Events and bytes per tenant, as insight_usage counts them. */
export async function tenantUsage(db: Queryable): Promise<Map<string, { events: number; bytes: number }>> {
  const rows = await db.all<{ tenant_id: string; events: number; bytes: number }>(
    'SELECT tenant_id, CAST(SUM(events) AS BIGINT) AS events, CAST(SUM(bytes) AS BIGINT) AS bytes FROM insight_usage GROUP BY tenant_id',
  );
  return new Map(rows.map((row) => [row.tenant_id, { events: Number(row.events), bytes: Number(row.bytes) }]));
}

type Deleted = { events: number; bytes: number };

/** Deletes a tenant's CHUNK oldest events (arrival order) with their rule rows; what it deleted. */
async function deleteOldest(db: Db, tenantId: string): Promise<Deleted> {
  return db.transaction((tx) =>
    deleteEvents(tx, 'seq IN (SELECT seq FROM insight_events WHERE tenant_id = ? ORDER BY seq LIMIT ?)', [tenantId, CHUNK]),
  );
}

async function deleteEvents(tx: Queryable, where: string, params: (string | number)[]): Promise<Deleted> {
  const rows = await tx.all<{ seq: number; tenant_id: string; stored_bytes: number }>(
    `DELETE FROM insight_events WHERE ${where} RETURNING seq, tenant_id, stored_bytes`,
    params,
  );
  if (rows.length === 0) return { events: 0, bytes: 0 };
  await tx.run(
    `DELETE FROM insight_event_rules WHERE event_seq IN (${rows.map(() => '?').join(', ')})`,
    rows.map((row) => Number(row.seq)),
  );
  const freed = new Map<string, { events: number; bytes: number }>();
  for (const row of rows) {
    const tenant = freed.get(row.tenant_id) ?? { events: 0, bytes: 0 };
    tenant.events--;
    tenant.bytes -= Number(row.stored_bytes);
    freed.set(row.tenant_id, tenant);
  }
  await addUsage(tx, '', freed);
  return { events: rows.length, bytes: rows.reduce((sum, row) => sum + Number(row.stored_bytes), 0) };
}

/** SQLite: deletes the events of days before `keepFrom`, oldest first, in chunks. */
async function deleteExpiredEvents(db: Db, keepFrom: number, report: RetentionReport): Promise<void> {
  for (;;) {
    const deleted = await db.transaction((tx) =>
      deleteEvents(tx, 'seq IN (SELECT seq FROM insight_events WHERE occurred_day < ? ORDER BY occurred_day LIMIT ?)', [keepFrom, CHUNK]),
    );
    if (deleted.events === 0) return;
    report.expired += deleted.events;
  }
}

/** PostgreSQL: drops the day partitions (events and rule rows) before `keepFrom`, after taking their rows out of insight_usage. */
async function dropExpiredPartitions(db: Db, keepFrom: number, report: RetentionReport): Promise<void> {
  const partitions = await db.all<{ name: string }>(
    `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
     WHERE p.relname = 'insight_events' AND p.relnamespace = to_regnamespace(current_schema())`,
  );
  const days = partitions
    .map((row) => Number(/^insight_events_d(\d+)$/.exec(row.name)?.[1]))
    .filter((day) => Number.isSafeInteger(day) && day < keepFrom)
    .sort((a, b) => a - b);
  for (const day of days) {
    const expired = await db.transaction(async (tx) => {
      // Waits for running appends into that day, then holds them off while it counts and drops.
      await tx.run(`SET LOCAL lock_timeout = '5s'`);
      await tx.run(`LOCK TABLE ONLY insight_events IN SHARE ROW EXCLUSIVE MODE`);
      const exists = await tx.one<{ name: string | null }>(`SELECT CAST(to_regclass(?) AS TEXT) AS name`, [`insight_events_d${day}`]);
      if (!exists?.name) return 0;
      const held = await tx.all<{ tenant_id: string; events: number; bytes: number }>(
        `SELECT tenant_id, COUNT(*) AS events, CAST(SUM(stored_bytes) AS BIGINT) AS bytes FROM insight_events_d${day} GROUP BY tenant_id`,
      );
      await addUsage(tx, '', new Map(held.map((row) => [row.tenant_id, { events: -Number(row.events), bytes: -Number(row.bytes) }])));
      await tx.run(`DROP TABLE insight_events_d${day}`);
      await tx.run(`DROP TABLE IF EXISTS insight_event_rules_d${day}`);
      return held.reduce((sum, row) => sum + Number(row.events), 0);
    });
    report.expired += expired;
    report.droppedPartitions++;
  }
}

/** The day up to which each store's rollups were cleaned: once a day is enough. */
const rollupsCleaned = new WeakMap<Db, number>();

/** Rollup rows of days before `keepFrom`, tenant by tenant (their keys start with the tenant). */
async function deleteExpiredRollups(db: Db, keepFrom: number): Promise<void> {
  if (rollupsCleaned.get(db) === keepFrom) return;
  const before = keepFrom * 86_400;
  const tenants = await db.all<{ tenant_id: string }>(`SELECT tenant_id FROM insight_usage UNION SELECT id AS tenant_id FROM tenants`);
  for (const { tenant_id: tenantId } of tenants) {
    await db.transaction(async (tx) => {
      for (const type of ['WAF_EVENT', 'APP_DDOS_ATTACK']) {
        await tx.run('DELETE FROM insight_minutes WHERE tenant_id = ? AND type = ? AND minute_s < ?', [tenantId, type, before]);
        for (const dim of ['ip', 'country', 'path', 'rule']) {
          await tx.run('DELETE FROM insight_hourly_keys WHERE tenant_id = ? AND dim = ? AND type = ? AND hour_s < ?', [
            tenantId,
            dim,
            type,
            before,
          ]);
          await tx.run('DELETE FROM insight_daily_keys WHERE tenant_id = ? AND dim = ? AND type = ? AND day_s < ?', [
            tenantId,
            dim,
            type,
            before,
          ]);
        }
      }
    });
  }
  rollupsCleaned.set(db, keepFrom);
}

/** Folds the writers' rows of insight_usage into one row per tenant (writer ''), without losing a concurrent append's. */
async function foldUsage(db: Db): Promise<void> {
  const upsert = `ON CONFLICT (tenant_id, writer) DO UPDATE SET events = insight_usage.events + excluded.events, bytes = insight_usage.bytes + excluded.bytes`;
  if (db.dialect === 'postgres') {
    await db.run(
      `WITH moved AS (DELETE FROM insight_usage WHERE writer <> '' RETURNING tenant_id, events, bytes)
       INSERT INTO insight_usage (tenant_id, writer, events, bytes)
       SELECT tenant_id, '', SUM(events), SUM(bytes) FROM moved GROUP BY tenant_id ${upsert}`,
    );
    return;
  }
  // SQLite: one writer at a time, so the two statements see the same rows.
  await db.transaction(async (tx) => {
    await tx.run(
      `INSERT INTO insight_usage (tenant_id, writer, events, bytes)
       SELECT tenant_id, '', SUM(events), SUM(bytes) FROM insight_usage WHERE writer <> '' GROUP BY tenant_id ${upsert}`,
    );
    await tx.run(`DELETE FROM insight_usage WHERE writer <> ''`);
  });
}
