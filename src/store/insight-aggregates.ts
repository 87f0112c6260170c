/**
 * Aggregations of insight events for the portal's dashboards, computed in the store (SQLite or
 * PostgreSQL, one SQL code path) so that a tenant with a million events gets its charts from a few
 * thousand rows, never from a scan of every event.
 *
 * Every number counts requests: an event counts for the requests it stands for (`requestCount`,
 * more than one for a sampled event under a flood, src/insight/sampler.ts), so the dashboards show
 * every request blocked or logged, however few of them are stored whole.
 *
 * Rollups are kept up to date by every append, in the same transaction as the events:
 * - insight_minutes: requests per (tenant, proxy, type, action, minute): charts and totals;
 * - insight_hourly_keys and insight_daily_keys: requests per (tenant, proxy, type, action, hour or
 *   day, dimension, key) for the dimensions source IP, country, path and WAF rule: the top lists.
 * A range is first aligned to whole minutes (and to the chart's step at its start). Top lists add
 * the whole days inside the range (daily rollup), the whole hours around them (hourly rollup) and
 * the raw events of the partial hours at both ends, so every number is exact for the range shown
 * and equals what the export reports.
 */
import type { Db, Queryable, SqlValue } from './db.ts';
import type { InsightEvent, InsightEventType } from '@tps/model';
import { requestsOf } from '../insight/sampler.ts';
import { dayOf, decodeEventBody } from './insight-body.ts';

export type TopDimension = 'rule' | 'ip' | 'country' | 'path';

export interface InsightFilter {
  tenantId: string;
  type: InsightEventType;
  /** One proxy only; absent: all the tenant's proxies. */
  configId?: string | undefined;
  /** Epoch seconds, [from, to): use dashboardRange() to get an aligned range. */
  from: number;
  to: number;
}

export interface DashboardRange {
  from: number;
  to: number;
  /** Seconds per chart bucket. */
  step: number;
}

export interface TimeBucket {
  /** Epoch seconds of the bucket's start. */
  start: number;
  blocked: number;
  logged: number;
}

export interface TopEntry {
  key: string;
  /** The rule's name (rules only). */
  label: string | null;
  events: number;
  blocked: number;
  logged: number;
}

export interface Dashboard {
  range: DashboardRange;
  totals: { events: number; blocked: number; logged: number; distinctSourceIps: number };
  series: TimeBucket[];
  top: Record<TopDimension, TopEntry[]>;
}

export interface EventListQuery extends InsightFilter {
  ruleId?: number | undefined;
  sourceIp?: string | undefined;
  countryCode?: string | undefined;
  path?: string | undefined;
  /** Opaque cursor from a previous page's `next`. */
  cursor?: string | undefined;
  size: number;
}

export interface EventPage {
  events: InsightEvent[];
  /** Cursor of the next (older) page; null when this page is the last. */
  next: string | null;
}

const STEPS = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
const MAX_BUCKETS = 120;
/** Paths are keys of the rollup (and of a primary key): cut to this many characters. */
export const PATH_KEY_LENGTH = 512;
const ROWS_PER_STATEMENT = 64;

/**
 * The range a dashboard shows for [from, to) (epoch seconds): `to` rounded up to the minute, a
 * step that gives at most 120 buckets, and `from` rounded down to a multiple of the step.
 */
export function dashboardRange(from: number, to: number): DashboardRange {
  const end = Math.ceil(to / 60) * 60;
  const span = Math.max(60, end - Math.floor(from / 60) * 60);
  const step = STEPS.find((candidate) => span / candidate <= MAX_BUCKETS) ?? STEPS.at(-1)!;
  return { from: Math.floor(from / step) * step, to: end, step };
}

const iso = (epochSeconds: number) => new Date(epochSeconds * 1000).toISOString();
const pathKey = (path: string | null | undefined) => {
  const value = path ?? '';
  // Characters, as SUBSTR counts them in both dialects (not UTF-16 units).
  return value.length <= PATH_KEY_LENGTH ? value : Array.from(value).slice(0, PATH_KEY_LENGTH).join('');
};

/** Rollup levels of the top lists, coarsest first: whole days, then whole hours; the rest is raw events. */
const KEY_LEVELS = [
  { seconds: 86_400, table: 'insight_daily_keys', column: 'day_s' },
  { seconds: 3600, table: 'insight_hourly_keys', column: 'hour_s' },
] as const;

/** Writes the rule rows and rollups of events just inserted (called by InsightEventRepository.append, same transaction). */
export async function recordInsightAggregates(tx: Queryable, appended: readonly { seq: number; event: InsightEvent }[]): Promise<void> {
  const minutes = new Map<string, SqlValue[]>();
  const keys = KEY_LEVELS.map(() => new Map<string, SqlValue[]>());
  const rules: SqlValue[][] = [];
  let weight = 1;
  const count = (map: Map<string, SqlValue[]>, row: SqlValue[]) => {
    const id = JSON.stringify(row.slice(0, -1));
    const existing = map.get(id);
    if (existing) existing[existing.length - 1] = Number(existing.at(-1)) + weight;
    else map.set(id, row);
  };
  for (const { seq, event } of appended) {
    const millis = Date.parse(event.timestamp);
    if (!Number.isFinite(millis)) continue;
    const seconds = Math.floor(millis / 1000);
    const configId = event.trafficConfigId ?? '';
    const base = [event.tenantId, configId, event.type, event.action];
    weight = requestsOf(event);
    count(minutes, [...base, Math.floor(seconds / 60) * 60, weight]);
    // The label (a rule's name) is written with the first event of the bucket and kept.
    const key = (dim: string, value: string, label: string | null = null) => {
      for (const [index, level] of KEY_LEVELS.entries()) {
        count(keys[index]!, [...base, Math.floor(seconds / level.seconds) * level.seconds, dim, value, label, weight]);
      }
    };
    key('ip', event.source?.ip ?? '');
    key('country', event.source?.countryCode ?? '');
    key('path', pathKey(event.request?.path));
    if (event.type !== 'WAF_EVENT') continue;
    const seen = new Set<number>();
    for (const rule of event.rules ?? []) {
      if (!Number.isInteger(rule.modSecId) || seen.has(rule.modSecId)) continue;
      seen.add(rule.modSecId);
      rules.push([
        seq,
        event.tenantId,
        configId,
        event.action,
        event.timestamp,
        dayOf(event.timestamp),
        weight,
        rule.modSecId,
        rule.name ?? '',
      ]);
      key('rule', String(rule.modSecId), rule.name ?? '');
    }
  }
  await insertMany(
    tx,
    'INSERT INTO insight_event_rules (event_seq, tenant_id, config_id, action, occurred_at, occurred_day, requests, rule_id, rule_name) VALUES',
    '',
    rules,
  );
  await insertMany(
    tx,
    'INSERT INTO insight_minutes (tenant_id, config_id, type, action, minute_s, events) VALUES',
    ' ON CONFLICT (tenant_id, type, minute_s, config_id, action) DO UPDATE SET events = insight_minutes.events + excluded.events',
    sortedRows(minutes),
  );
  for (const [index, level] of KEY_LEVELS.entries()) {
    await insertMany(
      tx,
      `INSERT INTO ${level.table} (tenant_id, config_id, type, action, ${level.column}, dim, dim_key, label, events) VALUES`,
      ` ON CONFLICT (tenant_id, dim, type, ${level.column}, config_id, action, dim_key) DO UPDATE SET events = ${level.table}.events + excluded.events`,
      sortedRows(keys[index]!),
    );
  }
}

/**
 * Rollup rows in the order of their keys: edge nodes appending at once update shared rollup rows
 * in the same order, so they wait for one another but never deadlock.
 */
function sortedRows(map: Map<string, SqlValue[]>): SqlValue[][] {
  return [...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, row]) => row);
}

/** Multi-row INSERTs of at most 64 rows each (so that few distinct statements are prepared). */
async function insertMany(tx: Queryable, head: string, tail: string, rows: readonly SqlValue[][]): Promise<void> {
  for (let offset = 0; offset < rows.length; offset += ROWS_PER_STATEMENT) {
    const chunk = rows.slice(offset, offset + ROWS_PER_STATEMENT);
    const tuple = `(${chunk[0]!.map(() => '?').join(', ')})`;
    await tx.run(`${head} ${chunk.map(() => tuple).join(', ')}${tail}`, chunk.flat());
  }
}

interface RangeParts {
  rollups: { table: string; column: string; from: number; to: number }[];
  raw: [string, string][];
}

/** Where the parts of a range come from: whole days, then whole hours from the rollups, the rest from raw events. */
function splitRange(from: number, to: number, level = 0, parts: RangeParts = { rollups: [], raw: [] }): RangeParts {
  if (from >= to) return parts;
  const rollup = KEY_LEVELS[level];
  if (!rollup) {
    parts.raw.push([iso(from), iso(to)]);
    return parts;
  }
  const first = Math.ceil(from / rollup.seconds) * rollup.seconds;
  const last = Math.floor(to / rollup.seconds) * rollup.seconds;
  if (first >= last) return splitRange(from, to, level + 1, parts);
  parts.rollups.push({ table: rollup.table, column: rollup.column, from: first, to: last });
  splitRange(from, first, level + 1, parts);
  splitRange(last, to, level + 1, parts);
  return parts;
}

const RAW_KEY: Record<Exclude<TopDimension, 'rule'>, string> = {
  ip: `COALESCE(source_ip, '')`,
  country: `COALESCE(country_code, '')`,
  path: `SUBSTR(COALESCE(path, ''), 1, ${PATH_KEY_LENGTH})`,
};

interface TopRow {
  item_key: string;
  label: string | null;
  events: number;
  blocked: number;
}

export class InsightAggregates {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  /** Totals, the chart and the top lists of one dashboard. */
  async dashboard(filter: InsightFilter, range: DashboardRange, limit = 10): Promise<Dashboard> {
    // Independent queries: PostgreSQL runs them on several pool connections at once (SQLite in turn).
    const [series, rule, ip, country, path] = await Promise.all([
      this.series(filter, range.step),
      this.#top(filter, 'rule', limit),
      this.#top(filter, 'ip', limit),
      this.#top(filter, 'country', limit),
      this.#top(filter, 'path', limit),
    ]);
    const blocked = series.reduce((sum, bucket) => sum + bucket.blocked, 0);
    const logged = series.reduce((sum, bucket) => sum + bucket.logged, 0);
    return {
      range,
      totals: { events: blocked + logged, blocked, logged, distinctSourceIps: ip.distinct },
      series,
      top: { rule: rule.entries, ip: ip.entries, country: country.entries, path: path.entries },
    };
  }

  /** Events per bucket of `step` seconds from `filter.from`, every bucket present (zeros included). */
  async series(filter: InsightFilter, step: number): Promise<TimeBucket[]> {
    const config = filter.configId === undefined ? '' : ' AND config_id = ?';
    const rows = await this.db.all<{ bucket: number; action: string; events: number }>(
      // CAST: SQLite binds JS numbers as REAL, which would make the division a fractional one.
      `SELECT CAST((minute_s - ?) / ? AS INTEGER) AS bucket, action, CAST(SUM(events) AS BIGINT) AS events FROM insight_minutes
       WHERE tenant_id = ? AND type = ? AND minute_s >= ? AND minute_s < ?${config} GROUP BY 1, 2`,
      [
        filter.from,
        step,
        filter.tenantId,
        filter.type,
        filter.from,
        filter.to,
        ...(filter.configId === undefined ? [] : [filter.configId]),
      ],
    );
    const buckets: TimeBucket[] = [];
    for (let start = filter.from; start < filter.to; start += step) buckets.push({ start, blocked: 0, logged: 0 });
    for (const row of rows) {
      const bucket = buckets[Number(row.bucket)];
      if (!bucket) continue;
      if (row.action === 'LOGGED') bucket.logged += Number(row.events);
      else bucket.blocked += Number(row.events);
    }
    return buckets;
  }

  /** The `limit` keys of a dimension with the most events in the range. */
  async top(filter: InsightFilter, dimension: TopDimension, limit = 10): Promise<TopEntry[]> {
    return (await this.#top(filter, dimension, limit)).entries;
  }

  /** The top keys and, in the same pass (a window over the groups), how many distinct keys there are. */
  async #top(filter: InsightFilter, dimension: TopDimension, limit: number): Promise<{ entries: TopEntry[]; distinct: number }> {
    const { sql, params } = this.#union(filter, dimension);
    if (!sql) return { entries: [], distinct: 0 };
    const rows = await this.db.all<TopRow & { distinct_keys: number }>(
      `SELECT item_key, MAX(item_label) AS label, CAST(SUM(all_events) AS BIGINT) AS events, CAST(SUM(blocked_events) AS BIGINT) AS blocked,
         COUNT(*) OVER () AS distinct_keys
       FROM (${sql}) AS parts GROUP BY item_key ORDER BY events DESC, item_key LIMIT ?`,
      [...params, limit],
    );
    const entries = rows.map((row) => ({
      key: row.item_key,
      label: row.label ?? null,
      events: Number(row.events),
      blocked: Number(row.blocked),
      logged: Number(row.events) - Number(row.blocked),
    }));
    return { entries, distinct: Number(rows[0]?.distinct_keys ?? 0) };
  }

  /** How many distinct keys of a dimension have events in the range. */
  async distinct(filter: InsightFilter, dimension: TopDimension): Promise<number> {
    const { sql, params } = this.#union(filter, dimension);
    if (!sql) return 0;
    const row = await this.db.one<{ keys: number }>(
      `SELECT COUNT(*) AS keys FROM (SELECT item_key FROM (${sql}) AS parts GROUP BY item_key) AS distinct_items`,
      params,
    );
    return Number(row?.keys ?? 0);
  }

  #union(filter: InsightFilter, dimension: TopDimension): { sql: string; params: SqlValue[] } {
    if (dimension === 'rule' && filter.type !== 'WAF_EVENT') return { sql: '', params: [] };
    const { rollups, raw } = splitRange(filter.from, filter.to);
    const config = filter.configId === undefined ? '' : ' AND config_id = ?';
    const configParam = filter.configId === undefined ? [] : [filter.configId];
    const parts: string[] = [];
    const params: SqlValue[] = [];
    for (const rollup of rollups) {
      parts.push(
        `SELECT dim_key AS item_key, label AS item_label, CASE WHEN action = 'BLOCKED' THEN events ELSE 0 END AS blocked_events, events AS all_events
         FROM ${rollup.table} WHERE tenant_id = ? AND dim = ? AND type = ? AND ${rollup.column} >= ? AND ${rollup.column} < ?${config}`,
      );
      params.push(filter.tenantId, dimension, filter.type, rollup.from, rollup.to, ...configParam);
    }
    for (const [start, end] of raw) {
      if (dimension === 'rule') {
        parts.push(
          `SELECT CAST(rule_id AS TEXT) AS item_key, rule_name AS item_label, CASE WHEN action = 'BLOCKED' THEN requests ELSE 0 END AS blocked_events,
             requests AS all_events
           FROM insight_event_rules WHERE tenant_id = ? AND occurred_at >= ? AND occurred_at < ?${config}`,
        );
        params.push(filter.tenantId, start, end, ...configParam);
      } else {
        parts.push(
          `SELECT ${RAW_KEY[dimension]} AS item_key, NULL AS item_label, CASE WHEN action = 'BLOCKED' THEN requests ELSE 0 END AS blocked_events,
             requests AS all_events
           FROM insight_events WHERE tenant_id = ? AND type = ? AND occurred_at >= ? AND occurred_at < ?${config}`,
        );
        params.push(filter.tenantId, filter.type, start, end, ...configParam);
      }
    }
    return { sql: parts.join(' UNION ALL '), params };
  }

  /** The events of a range, newest first, optionally of one rule, source IP, country or path. */
  async events(query: EventListQuery): Promise<EventPage> {
    const where: string[] = ['tenant_id = ?', 'type = ?', 'occurred_at >= ?', 'occurred_at < ?'];
    const params: SqlValue[] = [query.tenantId, query.type, iso(query.from), iso(query.to)];
    const equal = (sql: string, value: string | undefined) => {
      if (value === undefined) return;
      where.push(sql);
      params.push(value);
    };
    equal('config_id = ?', query.configId);
    equal('source_ip = ?', query.sourceIp);
    equal('country_code = ?', query.countryCode);
    equal(`${RAW_KEY.path} = ?`, query.path);
    if (query.ruleId !== undefined) {
      where.push(
        'seq IN (SELECT event_seq FROM insight_event_rules WHERE tenant_id = ? AND rule_id = ? AND occurred_at >= ? AND occurred_at < ?)',
      );
      params.push(query.tenantId, query.ruleId, iso(query.from), iso(query.to));
    }
    const cursor = decodeCursor(query.cursor);
    if (cursor) {
      where.push('(occurred_at < ? OR (occurred_at = ? AND seq < ?))');
      params.push(cursor.at, cursor.at, cursor.seq);
    }
    const rows = await this.db.all<{ seq: number; occurred_at: string; body: string }>(
      `SELECT seq, occurred_at, body FROM insight_events WHERE ${where.join(' AND ')} ORDER BY occurred_at DESC, seq DESC LIMIT ?`,
      [...params, query.size + 1],
    );
    const page = rows.slice(0, query.size);
    const last = page.at(-1);
    return {
      events: page.map((row) => decodeEventBody(row.body)),
      next: rows.length > query.size && last ? encodeCursor(last.occurred_at, Number(last.seq)) : null,
    };
  }

  /** One event of the tenant. */
  async event(tenantId: string, id: string): Promise<InsightEvent | undefined> {
    const row = await this.db.one<{ body: string }>('SELECT body FROM insight_events WHERE id = ? AND tenant_id = ?', [id, tenantId]);
    return row && decodeEventBody(row.body);
  }
}

const encodeCursor = (at: string, seq: number) => Buffer.from(JSON.stringify([at, seq])).toString('base64url');

export class BadCursorError extends Error {}

function decodeCursor(cursor: string | undefined): { at: string; seq: number } | undefined {
  if (cursor === undefined) return undefined;
  try {
    const [at, seq] = JSON.parse(Buffer.from(cursor, 'base64url').toString()) as [unknown, unknown];
    if (typeof at === 'string' && Number.isSafeInteger(seq)) return { at, seq: seq as number };
  } catch {
    // fall through
  }
  throw new BadCursorError('the cursor is not one this endpoint returned');
}
