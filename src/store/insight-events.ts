import type { Db } from './db.ts';
import type { InsightEvent, InsightEventType } from '../insight/event.ts';
import { recordInsightAggregates } from './insight-aggregates.ts';

export class UnknownCursorError extends Error {}

export class InsightEventRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  /**
   * Appends events in one transaction. On PostgreSQL the transaction takes a lock first, so that
   * sequence numbers are committed in the order they were drawn: a reader paging by cursor can then
   * never pass over an event that a slower writer commits later with a smaller number.
   */
  async append(events: readonly InsightEvent[]): Promise<void> {
    if (events.length === 0) return;
    await this.db.transaction(async (tx) => {
      if (tx.dialect === 'postgres') await tx.run('SELECT pg_advisory_xact_lock(7349002)');
      const appended: { seq: number; event: InsightEvent }[] = [];
      for (const event of events) {
        const row = await tx.one<{ seq: number }>(
          `INSERT INTO insight_events (id, tenant_id, config_id, type, action, occurred_at, source_ip, country_code, path, body)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
          [
            event.id,
            event.tenantId,
            event.trafficConfigId,
            event.type,
            event.action,
            event.timestamp,
            event.source.ip,
            event.source.countryCode,
            event.request.path,
            JSON.stringify(event),
          ],
        );
        appended.push({ seq: Number(row!.seq), event });
      }
      // The dashboards' rule rows and rollups, in the same transaction (see insight-aggregates.ts).
      await recordInsightAggregates(tx, appended);
    });
  }

  /** Rewrites an event in place (rate-limit episodes grow while they last); its cursor place stays. */
  async update(event: InsightEvent): Promise<void> {
    await this.db.run('UPDATE insight_events SET body = ? WHERE id = ?', [JSON.stringify(event), event.id]);
  }

  async get(id: string): Promise<InsightEvent | undefined> {
    const row = await this.db.one<{ body: string }>('SELECT body FROM insight_events WHERE id = ?', [id]);
    return row && (JSON.parse(row.body) as InsightEvent);
  }

  /** The tenant's events after the cursor event, in arrival order. */
  async page(query: { tenantId: string; type?: InsightEventType | undefined; after?: string | undefined; size: number }): Promise<InsightEvent[]> {
    let afterSeq = 0;
    if (query.after !== undefined) {
      const cursor = await this.db.one<{ seq: number }>('SELECT seq FROM insight_events WHERE id = ? AND tenant_id = ?', [
        query.after,
        query.tenantId,
      ]);
      if (!cursor) throw new UnknownCursorError(`no event ${query.after} for this tenant`);
      afterSeq = Number(cursor.seq);
    }
    const typeClause = query.type ? ' AND type = ?' : '';
    const params = [query.tenantId, afterSeq, ...(query.type ? [query.type] : []), query.size];
    const rows = await this.db.all<{ body: string }>(
      `SELECT body FROM insight_events WHERE tenant_id = ? AND seq > ?${typeClause} ORDER BY seq LIMIT ?`,
      params,
    );
    return rows.map((row) => JSON.parse(row.body) as InsightEvent);
  }
}
