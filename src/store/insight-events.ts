import type { Db, Queryable, SqlValue } from './db.ts';
import type { AppDdosAttackEvent, InsightEvent, InsightEventType } from '@tps/model';
import { requestsOf } from '../insight/sampler.ts';
import { recordInsightAggregates } from './insight-aggregates.ts';
import { dayOf, decodeEventBody, encodeEventBody, storedBytes } from './insight-body.ts';

export class UnknownCursorError extends Error {}

/** The counters of an APP_DDOS_ATTACK episode that grow while it lasts. */
export interface EpisodeUpdate {
  eventId: string;
  update: { lastBlockedAt: string; blockedRequests: number; blockedUntil: string };
}

const ROWS_PER_INSERT = 64;
/**
 * How long an export page waits for writes still running on PostgreSQL before it answers with
 * the events of finished transactions only (the rest come with the next page).
 */
const SETTLE_WAIT_MS = 2_000;
const SETTLE_POLL_MS = 20;

/**
 * PostgreSQL: the oldest transaction still running that could be writing events (a CTE named
 * `frontier`). The snapshot's running transactions, less those of backends connected to another
 * database (a backend never writes another database's tables; xids are cluster-wide, and other
 * databases' transactions would otherwise hold the export back). A transaction whose backend is
 * not listed (finished since the snapshot, or not visible) counts: the frontier errs on the safe side.
 */
const SETTLED_FRONTIER = `WITH frontier AS (SELECT COALESCE(
  (SELECT MIN(CAST(CAST(x AS TEXT) AS BIGINT)) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
   WHERE CAST(CAST(x AS TEXT) AS BIGINT) % 4294967296 NOT IN (
     SELECT CAST(CAST(backend_xid AS TEXT) AS BIGINT) FROM pg_stat_activity
     WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database())),
  CAST(CAST(pg_snapshot_xmax(pg_current_snapshot()) AS TEXT) AS BIGINT)) AS xid)`;

export class InsightEventRepository {
  readonly db: Db;
  /** Whose row of insight_usage this repository's appends add to (one per edge node). */
  readonly writer: string;
  /** Days whose partitions this process has made sure of (PostgreSQL). */
  readonly #partitions = new Set<number>();

  constructor(db: Db, options: { writer?: string } = {}) {
    this.db = db;
    this.writer = options.writer ?? '';
  }

  /**
   * Appends events in one transaction, with their rule rows, rollups and sizes. No lock is shared
   * with other writers: on SQLite the store has one writer at a time, so seq is the arrival order;
   * on PostgreSQL each row records its transaction and readers wait for it to finish (page()).
   */
  async append(events: readonly InsightEvent[]): Promise<void> {
    if (events.length === 0) return;
    const rows = events.map((event) => {
      const body = encodeEventBody(event);
      return { event, body, day: dayOf(event.timestamp), bytes: storedBytes(body, event), requests: requestsOf(event) };
    });
    if (this.db.dialect === 'postgres') await this.ensurePartitions(rows.map((row) => row.day));
    await this.db.transaction(async (tx) => {
      const appended: { seq: number; event: InsightEvent }[] = [];
      for (let offset = 0; offset < rows.length; offset += ROWS_PER_INSERT) {
        const chunk = rows.slice(offset, offset + ROWS_PER_INSERT);
        const inserted = await tx.all<{ seq: number; id: string }>(
          `INSERT INTO insight_events (id, tenant_id, config_id, type, action, occurred_at, occurred_day, source_ip, country_code, path, requests, stored_bytes, body)
           VALUES ${chunk.map(() => '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')} RETURNING seq, id`,
          chunk.flatMap(({ event, body, day, bytes, requests }) => [
            event.id,
            event.tenantId,
            event.trafficConfigId,
            event.type,
            event.action,
            event.timestamp,
            day,
            event.source.ip,
            event.source.countryCode,
            event.request.path,
            requests,
            bytes,
            body,
          ]),
        );
        const seqs = new Map(inserted.map((row) => [row.id, Number(row.seq)]));
        for (const { event } of chunk) appended.push({ seq: seqs.get(event.id)!, event });
      }
      // The dashboards' rule rows and rollups, in the same transaction (see insight-aggregates.ts).
      await recordInsightAggregates(tx, appended);
      const usage = new Map<string, { events: number; bytes: number }>();
      for (const row of rows) {
        const tenant = usage.get(row.event.tenantId) ?? { events: 0, bytes: 0 };
        tenant.events++;
        tenant.bytes += row.bytes;
        usage.set(row.event.tenantId, tenant);
      }
      await addUsage(tx, this.writer, usage);
    });
  }

  /**
   * Makes sure the day partitions exist (PostgreSQL), in a transaction of their own: a lock taken
   * once per new day and process, never on the append path itself.
   */
  async ensurePartitions(days: readonly number[]): Promise<void> {
    const missing = [...new Set(days)].filter((day) => !this.#partitions.has(day));
    if (missing.length === 0) return;
    await this.db.transaction(async (tx) => {
      await tx.run('SELECT pg_advisory_xact_lock(7349004)');
      for (const day of missing) {
        if (!Number.isSafeInteger(day)) continue;
        for (const table of ['insight_events', 'insight_event_rules']) {
          await tx.run(`CREATE TABLE IF NOT EXISTS ${table}_d${day} PARTITION OF ${table} FOR VALUES FROM (${day}) TO (${day + 1})`);
        }
      }
    });
    for (const day of missing) this.#partitions.add(day);
  }

  /** Forgets which partitions exist (the retention work dropped some). */
  forgetPartitions(): void {
    this.#partitions.clear();
  }

  /** Updates the counters of rate-limit episodes (rewritten in place: their cursor place stays). */
  async updateEpisodes(updates: readonly EpisodeUpdate[]): Promise<void> {
    if (updates.length === 0) return;
    await this.db.transaction(async (tx) => {
      const usage = new Map<string, { events: number; bytes: number }>();
      for (const { eventId, update } of updates) {
        const row = await tx.one<{ tenant_id: string; body: string; stored_bytes: number }>(
          'SELECT tenant_id, body, stored_bytes FROM insight_events WHERE id = ?',
          [eventId],
        );
        if (!row) continue;
        const event = decodeEventBody(row.body);
        if (event.type !== 'APP_DDOS_ATTACK') continue;
        Object.assign((event as AppDdosAttackEvent).rateLimit, update);
        const body = encodeEventBody(event);
        const bytes = storedBytes(body, event);
        await tx.run('UPDATE insight_events SET body = ?, stored_bytes = ? WHERE id = ?', [body, bytes, eventId]);
        const tenant = usage.get(row.tenant_id) ?? { events: 0, bytes: 0 };
        tenant.bytes += bytes - Number(row.stored_bytes);
        usage.set(row.tenant_id, tenant);
      }
      await addUsage(tx, this.writer, usage);
    });
  }

  async get(id: string): Promise<InsightEvent | undefined> {
    const row = await this.db.one<{ body: string }>('SELECT body FROM insight_events WHERE id = ?', [id]);
    return row && decodeEventBody(row.body);
  }

  /**
   * The tenant's events after the cursor event, in arrival order.
   *
   * SQLite: seq order (one writer at a time draws and commits its numbers in order). PostgreSQL:
   * (xid, seq) order, returning only rows whose transaction is older than every transaction still
   * running in this database (SETTLED_FRONTIER; the snapshot's xmin, less other databases'): a
   * transaction that commits later always has a larger xid than every row already returned, so a
   * reader paging by cursor sees every event exactly once. While older transactions run, the page
   * waits for them (up to SETTLE_WAIT_MS), then answers the finished part.
   */
  async page(query: {
    tenantId: string;
    type?: InsightEventType | undefined;
    /** Only events with this action (CHALLENGED: the distributed attacks). */
    action?: InsightEvent['action'] | undefined;
    after?: string | undefined;
    size: number;
  }): Promise<InsightEvent[]> {
    const postgres = this.db.dialect === 'postgres';
    let after = { xid: 0, seq: 0 };
    if (query.after !== undefined) {
      const cursor = await this.db.one<{ seq: number; xid?: number }>(
        `SELECT seq${postgres ? ', xid' : ''} FROM insight_events WHERE id = ? AND tenant_id = ?`,
        [query.after, query.tenantId],
      );
      if (!cursor) throw new UnknownCursorError(`no event ${query.after} for this tenant`);
      after = { xid: Number(cursor.xid ?? 0), seq: Number(cursor.seq) };
    }
    const typeClause = (query.type ? ' AND type = ?' : '') + (query.action ? ' AND action = ?' : '');
    const typeParam: SqlValue[] = [...(query.type ? [query.type] : []), ...(query.action ? [query.action] : [])];
    if (!postgres) {
      const rows = await this.db.all<{ body: string }>(
        `SELECT body FROM insight_events WHERE tenant_id = ?${typeClause} AND seq > ? ORDER BY seq LIMIT ?`,
        [query.tenantId, ...typeParam, after.seq, query.size],
      );
      return rows.map((row) => decodeEventBody(row.body));
    }
    // The rows seen first are the page: waiting lets them settle, newer rows wait for the next page.
    const deadline = Date.now() + SETTLE_WAIT_MS;
    let upTo: { xid: number; seq: number } | undefined;
    for (;;) {
      const rows = await this.db.all<{ body: string; xid: number; seq: number; settled: boolean }>(
        `${SETTLED_FRONTIER} SELECT body, e.xid, seq, e.xid < frontier.xid AS settled FROM insight_events e, frontier
         WHERE tenant_id = ?${typeClause} AND (e.xid, seq) > (?, ?)${upTo ? ' AND (e.xid, seq) <= (?, ?)' : ''} ORDER BY e.xid, seq LIMIT ?`,
        [query.tenantId, ...typeParam, after.xid, after.seq, ...(upTo ? [upTo.xid, upTo.seq] : []), query.size],
      );
      const unsettled = rows.findIndex((row) => !row.settled);
      if (unsettled === -1 || Date.now() >= deadline) {
        return rows.slice(0, unsettled === -1 ? rows.length : unsettled).map((row) => decodeEventBody(row.body));
      }
      const last = rows.at(-1)!;
      upTo ??= { xid: Number(last.xid), seq: Number(last.seq) };
      await new Promise((resolve) => setTimeout(resolve, SETTLE_POLL_MS));
    }
  }
}

/** Adds to the writer's row of insight_usage per tenant (sorted: concurrent writers lock rows in one order). */
export async function addUsage(tx: Queryable, writer: string, usage: Map<string, { events: number; bytes: number }>): Promise<void> {
  const rows = [...usage.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (let offset = 0; offset < rows.length; offset += ROWS_PER_INSERT) {
    const chunk = rows.slice(offset, offset + ROWS_PER_INSERT);
    await tx.run(
      `INSERT INTO insight_usage (tenant_id, writer, events, bytes) VALUES ${chunk.map(() => '(?, ?, ?, ?)').join(', ')}
       ON CONFLICT (tenant_id, writer) DO UPDATE SET events = insight_usage.events + excluded.events, bytes = insight_usage.bytes + excluded.bytes`,
      chunk.flatMap(([tenantId, { events, bytes }]) => [tenantId, writer, events, bytes]),
    );
  }
}
