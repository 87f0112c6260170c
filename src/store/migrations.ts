/**
 * Schema migrations, applied in order at every start by whichever process opens the store first
 * (serve, edge or the CLI). Append new migrations; never edit one that has shipped.
 */
import type { Db, Dialect, Queryable } from './db.ts';

interface Migration {
  id: number;
  name: string;
  statements: (dialect: Dialect) => string[];
}

const autoIncrementKey = (dialect: Dialect) => (dialect === 'postgres' ? 'BIGSERIAL PRIMARY KEY' : 'INTEGER PRIMARY KEY AUTOINCREMENT');

const MIGRATIONS: Migration[] = [
  {
    id: 1,
    name: 'control plane',
    statements: (dialect) => [
      `CREATE TABLE tenants (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at TEXT NOT NULL)`,
      `CREATE TABLE service_accounts (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL REFERENCES tenants(id),
        name TEXT NOT NULL,
        client_id TEXT NOT NULL UNIQUE,
        secret_hash TEXT NOT NULL,
        scopes TEXT NOT NULL,
        created_at TEXT NOT NULL,
        revoked_at TEXT,
        last_token TEXT)`,
      `CREATE INDEX service_accounts_tenant ON service_accounts (tenant_id)`,
      `CREATE TABLE signing_keys (
        kid TEXT PRIMARY KEY,
        public_jwk TEXT NOT NULL,
        private_key TEXT NOT NULL,
        created_at TEXT NOT NULL)`,
      `CREATE TABLE store_revision (
        singleton INTEGER PRIMARY KEY,
        revision BIGINT NOT NULL)`,
      `INSERT INTO store_revision (singleton, revision) VALUES (1, 0)`,
      `CREATE TABLE traffic_configs (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL REFERENCES tenants(id),
        type TEXT NOT NULL,
        attributes TEXT NOT NULL,
        revision BIGINT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)`,
      `CREATE INDEX traffic_configs_tenant ON traffic_configs (tenant_id)`,
      // The primary key is the rule "one proxy per (ip, port, protocol)", enforced by the store
      // itself so that two concurrent API calls (or two API nodes) cannot both win.
      `CREATE TABLE frontend_bindings (
        ip TEXT NOT NULL,
        port INTEGER NOT NULL,
        protocol TEXT NOT NULL,
        config_id TEXT NOT NULL REFERENCES traffic_configs(id) ON DELETE CASCADE,
        PRIMARY KEY (ip, port, protocol))`,
      `CREATE INDEX frontend_bindings_config ON frontend_bindings (config_id)`,
      `CREATE TABLE config_references (
        config_id TEXT NOT NULL REFERENCES traffic_configs(id) ON DELETE CASCADE,
        ref_kind TEXT NOT NULL,
        ref_id TEXT NOT NULL,
        PRIMARY KEY (config_id, ref_kind, ref_id))`,
      `CREATE INDEX config_references_ref ON config_references (ref_id)`,
      `CREATE TABLE edge_nodes (
        node_id TEXT PRIMARY KEY,
        location TEXT NOT NULL,
        heartbeat_at BIGINT NOT NULL)`,
      `CREATE TABLE edge_status (
        node_id TEXT NOT NULL,
        config_id TEXT NOT NULL,
        revision BIGINT NOT NULL,
        state TEXT NOT NULL,
        detail TEXT,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (node_id, config_id))`,
      `CREATE TABLE certificates (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL REFERENCES tenants(id),
        source TEXT NOT NULL,
        status TEXT NOT NULL,
        status_detail TEXT,
        domains TEXT NOT NULL,
        certificate_pem TEXT,
        chain_pem TEXT,
        private_key TEXT,
        subject TEXT,
        sans TEXT,
        issuer TEXT,
        not_before TEXT,
        not_after TEXT,
        fingerprint TEXT,
        revision BIGINT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)`,
      `CREATE INDEX certificates_tenant ON certificates (tenant_id)`,
      `CREATE TABLE ca_certificates (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL REFERENCES tenants(id),
        entries TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)`,
      `CREATE INDEX ca_certificates_tenant ON ca_certificates (tenant_id)`,
      // seq is the arrival order: the export's cursor order.
      `CREATE TABLE insight_events (
        seq ${autoIncrementKey(dialect)},
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        config_id TEXT,
        type TEXT NOT NULL,
        action TEXT NOT NULL,
        occurred_at TEXT NOT NULL,
        source_ip TEXT,
        country_code TEXT,
        path TEXT,
        body TEXT NOT NULL)`,
      `CREATE INDEX insight_events_tenant ON insight_events (tenant_id, seq)`,
      `CREATE INDEX insight_events_tenant_type ON insight_events (tenant_id, type, seq)`,
    ],
  },
  {
    id: 2,
    name: 'portal users and insight aggregates',
    statements: (dialect) => {
      // Clustered rollup tables on SQLite (the primary key is the table); PostgreSQL has no such option.
      const clustered = dialect === 'sqlite' ? ' WITHOUT ROWID' : '';
      // Start of the minute / hour of an ISO 8601 timestamp as epoch seconds (backfill only: new
      // events are bucketed by the repository as they are appended).
      const epoch = (column: string) =>
        dialect === 'sqlite'
          ? `CAST(strftime('%s', ${column}) AS INTEGER)`
          : `CAST(FLOOR(EXTRACT(EPOCH FROM CAST(${column} AS TIMESTAMPTZ))) AS BIGINT)`;
      const bucket = (column: string, seconds: number) => `((${epoch(column)} / ${seconds}) * ${seconds})`;
      const keysBackfill = (dim: string, key: string) =>
        `INSERT INTO insight_hourly_keys (tenant_id, config_id, type, action, hour_s, dim, dim_key, label, events)
         SELECT tenant_id, COALESCE(config_id, ''), type, action, ${bucket('occurred_at', 3600)}, '${dim}', ${key}, NULL, COUNT(*)
         FROM insight_events GROUP BY tenant_id, COALESCE(config_id, ''), type, action, ${bucket('occurred_at', 3600)}, ${key}`;
      return [
        // People who sign in to the portal; each belongs to one tenant and sees only it.
        `CREATE TABLE portal_users (
          id TEXT PRIMARY KEY,
          tenant_id TEXT NOT NULL REFERENCES tenants(id),
          email TEXT NOT NULL UNIQUE,
          password_hash TEXT NOT NULL,
          created_at TEXT NOT NULL,
          disabled_at TEXT)`,
        `CREATE INDEX portal_users_tenant ON portal_users (tenant_id)`,
        // Only a hash of the session token is stored: a copy of the table opens no session.
        `CREATE TABLE portal_sessions (
          token_hash TEXT PRIMARY KEY,
          user_id TEXT NOT NULL REFERENCES portal_users(id) ON DELETE CASCADE,
          tenant_id TEXT NOT NULL,
          csrf_token TEXT NOT NULL,
          created_at BIGINT NOT NULL,
          last_seen_at BIGINT NOT NULL,
          expires_at BIGINT NOT NULL)`,
        `CREATE INDEX portal_sessions_user ON portal_sessions (user_id)`,
        `CREATE INDEX portal_sessions_expiry ON portal_sessions (expires_at)`,
        // Failed sign-ins per throttle key (a hash of email + client IP, or of the IP alone), in the
        // store so that every API node counts the same attempts.
        `CREATE TABLE portal_login_failures (
          throttle_key TEXT NOT NULL,
          failed_at BIGINT NOT NULL)`,
        `CREATE INDEX portal_login_failures_key ON portal_login_failures (throttle_key, failed_at)`,

        // Dashboards: time-range scans of raw events (the partial hours at both ends of a range,
        // and the event list, newest first).
        `CREATE INDEX insight_events_time ON insight_events (tenant_id, type, occurred_at, seq)`,
        `CREATE INDEX insight_events_config_time ON insight_events (tenant_id, config_id, type, occurred_at, seq)`,
        // The rules each WAF event matched, one row per (event, rule): top rules, "events of rule X".
        `CREATE TABLE insight_event_rules (
          event_seq BIGINT NOT NULL,
          tenant_id TEXT NOT NULL,
          config_id TEXT,
          action TEXT NOT NULL,
          occurred_at TEXT NOT NULL,
          rule_id INTEGER NOT NULL,
          rule_name TEXT NOT NULL,
          PRIMARY KEY (event_seq, rule_id))`,
        `CREATE INDEX insight_event_rules_time ON insight_event_rules (tenant_id, occurred_at)`,
        `CREATE INDEX insight_event_rules_rule ON insight_event_rules (tenant_id, rule_id, occurred_at)`,
        // Rollups kept up to date by every append: events per minute (charts, totals) and events per
        // hour and per day per source IP, country, path and rule (top lists). See insight-aggregates.ts.
        `CREATE TABLE insight_minutes (
          tenant_id TEXT NOT NULL,
          config_id TEXT NOT NULL,
          type TEXT NOT NULL,
          action TEXT NOT NULL,
          minute_s BIGINT NOT NULL,
          events BIGINT NOT NULL,
          PRIMARY KEY (tenant_id, type, minute_s, config_id, action))${clustered}`,
        `CREATE TABLE insight_hourly_keys (
          tenant_id TEXT NOT NULL,
          config_id TEXT NOT NULL,
          type TEXT NOT NULL,
          action TEXT NOT NULL,
          hour_s BIGINT NOT NULL,
          dim TEXT NOT NULL,
          dim_key TEXT NOT NULL,
          label TEXT,
          events BIGINT NOT NULL,
          PRIMARY KEY (tenant_id, dim, type, hour_s, config_id, action, dim_key))${clustered}`,
        `CREATE TABLE insight_daily_keys (
          tenant_id TEXT NOT NULL,
          config_id TEXT NOT NULL,
          type TEXT NOT NULL,
          action TEXT NOT NULL,
          day_s BIGINT NOT NULL,
          dim TEXT NOT NULL,
          dim_key TEXT NOT NULL,
          label TEXT,
          events BIGINT NOT NULL,
          PRIMARY KEY (tenant_id, dim, type, day_s, config_id, action, dim_key))${clustered}`,

        // Backfill from the events stored before this migration.
        dialect === 'sqlite'
          ? `INSERT OR IGNORE INTO insight_event_rules (event_seq, tenant_id, config_id, action, occurred_at, rule_id, rule_name)
             SELECT e.seq, e.tenant_id, e.config_id, e.action, e.occurred_at, CAST(json_extract(r.value, '$.modSecId') AS INTEGER),
                    COALESCE(json_extract(r.value, '$.name'), '')
             FROM insight_events e, json_each(e.body, '$.rules') r
             WHERE e.type = 'WAF_EVENT' AND json_extract(r.value, '$.modSecId') IS NOT NULL`
          : `INSERT INTO insight_event_rules (event_seq, tenant_id, config_id, action, occurred_at, rule_id, rule_name)
             SELECT e.seq, e.tenant_id, e.config_id, e.action, e.occurred_at, CAST(r.value->>'modSecId' AS INTEGER),
                    COALESCE(r.value->>'name', '')
             FROM insight_events e CROSS JOIN LATERAL jsonb_array_elements(CAST(e.body AS JSONB)->'rules') AS r(value)
             WHERE e.type = 'WAF_EVENT' AND r.value->>'modSecId' IS NOT NULL
             ON CONFLICT DO NOTHING`,
        `INSERT INTO insight_minutes (tenant_id, config_id, type, action, minute_s, events)
         SELECT tenant_id, COALESCE(config_id, ''), type, action, ${bucket('occurred_at', 60)}, COUNT(*)
         FROM insight_events GROUP BY tenant_id, COALESCE(config_id, ''), type, action, ${bucket('occurred_at', 60)}`,
        keysBackfill('ip', `COALESCE(source_ip, '')`),
        keysBackfill('country', `COALESCE(country_code, '')`),
        keysBackfill('path', `SUBSTR(COALESCE(path, ''), 1, 512)`),
        `INSERT INTO insight_hourly_keys (tenant_id, config_id, type, action, hour_s, dim, dim_key, label, events)
         SELECT tenant_id, COALESCE(config_id, ''), 'WAF_EVENT', action, ${bucket('occurred_at', 3600)}, 'rule', CAST(rule_id AS TEXT),
                MAX(rule_name), COUNT(*)
         FROM insight_event_rules GROUP BY tenant_id, COALESCE(config_id, ''), action, ${bucket('occurred_at', 3600)}, rule_id`,
        `INSERT INTO insight_daily_keys (tenant_id, config_id, type, action, day_s, dim, dim_key, label, events)
         SELECT tenant_id, config_id, type, action, (hour_s / 86400) * 86400, dim, dim_key, MAX(label), SUM(events)
         FROM insight_hourly_keys GROUP BY tenant_id, config_id, type, action, (hour_s / 86400) * 86400, dim, dim_key`,
      ];
    },
  },
  {
    id: 3,
    name: 'acme issuance, renewal and CRLs',
    statements: () => [
      // One ACME account per directory URL; its key is sealed with the master key.
      `CREATE TABLE acme_accounts (
        directory_url TEXT PRIMARY KEY,
        email TEXT,
        account_url TEXT NOT NULL,
        private_key TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL)`,
      // Pending challenges, in the store so that every edge node can answer them.
      `CREATE TABLE acme_challenges (
        type TEXT NOT NULL,
        token TEXT NOT NULL,
        domain TEXT NOT NULL,
        key_authorization TEXT NOT NULL,
        certificate_id TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (type, token))`,
      `CREATE INDEX acme_challenges_domain ON acme_challenges (domain)`,
      `CREATE INDEX acme_challenges_certificate ON acme_challenges (certificate_id)`,
      // The ACME work on a service-issued certificate: when to renew, retries, and a lease so
      // that only one node works on it at a time.
      `ALTER TABLE certificates ADD COLUMN renew_after TEXT`,
      `ALTER TABLE certificates ADD COLUMN next_attempt_at TEXT`,
      `ALTER TABLE certificates ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0`,
      `ALTER TABLE certificates ADD COLUMN last_renewal_error TEXT`,
      `ALTER TABLE certificates ADD COLUMN renewal_requested_at TEXT`,
      `ALTER TABLE certificates ADD COLUMN lease_owner TEXT`,
      `ALTER TABLE certificates ADD COLUMN lease_until TEXT`,
      // The last good, verified CRL of each CA certificate entry, and the last fetch error.
      `CREATE TABLE crl_cache (
        ca_certificate_id TEXT NOT NULL,
        entry_index INTEGER NOT NULL,
        crl_url TEXT NOT NULL,
        crl_pem TEXT,
        this_update TEXT,
        next_update TEXT,
        fetched_at TEXT,
        attempted_at TEXT,
        last_error TEXT,
        PRIMARY KEY (ca_certificate_id, entry_index))`,
    ],
  },
  {
    id: 4,
    name: 'tenant-scoped acme',
    statements: (dialect) => [
      // One ACME account per tenant (and directory): one tenant's orders cannot use up another's
      // limits at the CA. The account shared by all tenants is left to expire at the CA.
      `DROP TABLE acme_accounts`,
      `CREATE TABLE acme_accounts (
        directory_url TEXT NOT NULL,
        tenant_id TEXT NOT NULL REFERENCES tenants(id),
        email TEXT,
        account_url TEXT NOT NULL,
        private_key TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (directory_url, tenant_id))`,
      // A challenge is answered only by proxies of the tenant that ordered. Rows live minutes;
      // those of running orders are written again by the next attempt.
      `DELETE FROM acme_challenges`,
      `ALTER TABLE acme_challenges ADD COLUMN tenant_id TEXT NOT NULL DEFAULT ''`,
      // The names of service-issued certificates, to find the tenant that claims a domain.
      `CREATE TABLE acme_certificate_domains (
        certificate_id TEXT NOT NULL REFERENCES certificates(id) ON DELETE CASCADE,
        tenant_id TEXT NOT NULL,
        domain TEXT NOT NULL,
        PRIMARY KEY (certificate_id, domain))`,
      `CREATE INDEX acme_certificate_domains_domain ON acme_certificate_domains (domain)`,
      dialect === 'postgres'
        ? `INSERT INTO acme_certificate_domains (certificate_id, tenant_id, domain)
           SELECT DISTINCT c.id, c.tenant_id, d.value FROM certificates c, jsonb_array_elements_text(c.domains::jsonb) AS d(value)
           WHERE c.source = 'ACME'`
        : `INSERT OR IGNORE INTO acme_certificate_domains (certificate_id, tenant_id, domain)
           SELECT c.id, c.tenant_id, d.value FROM certificates c, json_each(c.domains) AS d
           WHERE c.source = 'ACME'`,
      // What the edge serves while the certificate a configuration names is not issued yet (the
      // configuration as it was before the PUT or PATCH that named it); NULL otherwise.
      `ALTER TABLE traffic_configs ADD COLUMN interim_attributes TEXT`,
    ],
  },
  {
    id: 5,
    name: 'front-end binding holders',
    statements: () => [
      // JSON {"ip|port|protocol": revision}: since when a configuration claims each of its bindings.
      // NULL (rows from before): the configuration's own revision stands in (traffic-configs.ts).
      `ALTER TABLE traffic_configs ADD COLUMN binding_since TEXT`,
    ],
  },
  {
    id: 6,
    name: 'insight under a flood: weights, sizes, partitions, several writers',
    statements: (dialect) => (dialect === 'postgres' ? insightPartitionsPostgres() : insightBoundsSqlite()),
  },
  {
    id: 7,
    name: 'claims of pending service-issued certificates end',
    statements: (dialect) => [
      // Until when a PENDING service-issued order claims its names (beyond it, only while an
      // attempt holds the lease). Orders pending at the upgrade get a day from their creation.
      `ALTER TABLE certificates ADD COLUMN claim_until TEXT`,
      `UPDATE certificates SET claim_until = ${
        dialect === 'postgres'
          ? `to_char((CAST(created_at AS TIMESTAMPTZ) + INTERVAL '1 day') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
          : `strftime('%Y-%m-%dT%H:%M:%fZ', created_at, '+1 day')`
      } WHERE source = 'ACME' AND status = 'PENDING'`,
    ],
  },
];

/**
 * The estimated size of an event written before migration 4: its JSON, plus bytes per row and per
 * rule row (EVENT_ROW_OVERHEAD_BYTES, RULE_ROW_BYTES of insight-body.ts when it was written).
 */
const EVENT_ROW_OVERHEAD_BYTES = 700;
const RULE_ROW_BYTES = 400;

/** Days since 1970-01-01 (UTC) of an ISO 8601 column, in SQL (the events' partition key). */
const daySql = (dialect: Dialect, column: string) =>
  dialect === 'sqlite'
    ? `(CAST(strftime('%s', ${column}) AS INTEGER) / 86400)`
    : `CAST(FLOOR(EXTRACT(EPOCH FROM CAST(${column} AS TIMESTAMPTZ)) / 86400) AS INTEGER)`;

/**
 * Bytes each tenant's events hold, per writer (an edge node adds to its own row, so several nodes
 * never wait on one another's counter; the retention work folds the rows together).
 */
const usageTable = `CREATE TABLE insight_usage (
  tenant_id TEXT NOT NULL,
  writer TEXT NOT NULL,
  events BIGINT NOT NULL,
  bytes BIGINT NOT NULL,
  PRIMARY KEY (tenant_id, writer))`;
const usageBackfill = `INSERT INTO insight_usage (tenant_id, writer, events, bytes)
  SELECT tenant_id, '', COUNT(*), SUM(stored_bytes) FROM insight_events GROUP BY tenant_id`;

/** SQLite: one writer at a time, so seq is the arrival order as it is; events gain a weight and a size. */
function insightBoundsSqlite(): string[] {
  return [
    `ALTER TABLE insight_events ADD COLUMN requests INTEGER NOT NULL DEFAULT 1`,
    `ALTER TABLE insight_events ADD COLUMN stored_bytes INTEGER NOT NULL DEFAULT 0`,
    `ALTER TABLE insight_events ADD COLUMN occurred_day INTEGER NOT NULL DEFAULT 0`,
    `ALTER TABLE insight_event_rules ADD COLUMN requests INTEGER NOT NULL DEFAULT 1`,
    `ALTER TABLE insight_event_rules ADD COLUMN occurred_day INTEGER NOT NULL DEFAULT 0`,
    `UPDATE insight_events SET occurred_day = ${daySql('sqlite', 'occurred_at')},
       stored_bytes = LENGTH(CAST(body AS BLOB)) + ${EVENT_ROW_OVERHEAD_BYTES}
         + ${RULE_ROW_BYTES} * (SELECT COUNT(*) FROM insight_event_rules r WHERE r.event_seq = insight_events.seq)`,
    `UPDATE insight_event_rules SET occurred_day = ${daySql('sqlite', 'occurred_at')}`,
    // Retention by age across tenants.
    `CREATE INDEX insight_events_day ON insight_events (occurred_day)`,
    usageTable,
    usageBackfill,
  ];
}

/**
 * PostgreSQL: events and their rule rows partitioned by day (retention drops whole partitions), and
 * each row records the transaction that wrote it (xid), so several edge nodes append at once
 * without a lock: readers return rows of finished transactions only, in (xid, seq) order
 * (insight-events.ts). The rows before this migration are copied over in their order.
 */
function insightPartitionsPostgres(): string[] {
  return [
    `CREATE SEQUENCE insight_event_seq`,
    `SELECT setval('insight_event_seq', COALESCE((SELECT MAX(seq) FROM insight_events), 0) + 1, false)`,
    `ALTER TABLE insight_events RENAME TO insight_events_unpartitioned`,
    `ALTER TABLE insight_event_rules RENAME TO insight_event_rules_unpartitioned`,
    `CREATE TABLE insight_events (
      seq BIGINT NOT NULL DEFAULT nextval('insight_event_seq'),
      xid BIGINT NOT NULL DEFAULT CAST(CAST(pg_current_xact_id() AS TEXT) AS BIGINT),
      id TEXT NOT NULL,
      tenant_id TEXT NOT NULL,
      config_id TEXT,
      type TEXT NOT NULL,
      action TEXT NOT NULL,
      occurred_at TEXT NOT NULL,
      occurred_day INTEGER NOT NULL,
      source_ip TEXT,
      country_code TEXT,
      path TEXT,
      requests INTEGER NOT NULL DEFAULT 1,
      stored_bytes INTEGER NOT NULL,
      body TEXT NOT NULL) PARTITION BY RANGE (occurred_day)`,
    `CREATE TABLE insight_event_rules (
      event_seq BIGINT NOT NULL,
      tenant_id TEXT NOT NULL,
      config_id TEXT,
      action TEXT NOT NULL,
      occurred_at TEXT NOT NULL,
      occurred_day INTEGER NOT NULL,
      requests INTEGER NOT NULL DEFAULT 1,
      rule_id INTEGER NOT NULL,
      rule_name TEXT NOT NULL,
      PRIMARY KEY (event_seq, rule_id, occurred_day)) PARTITION BY RANGE (occurred_day)`,
    `DO $$
     DECLARE day INTEGER;
     BEGIN
       FOR day IN SELECT DISTINCT ${daySql('postgres', 'occurred_at')} FROM insight_events_unpartitioned LOOP
         EXECUTE format('CREATE TABLE insight_events_d%s PARTITION OF insight_events FOR VALUES FROM (%s) TO (%s)', day, day, day + 1);
         EXECUTE format('CREATE TABLE insight_event_rules_d%s PARTITION OF insight_event_rules FOR VALUES FROM (%s) TO (%s)', day, day, day + 1);
       END LOOP;
     END $$`,
    `INSERT INTO insight_events (seq, id, tenant_id, config_id, type, action, occurred_at, occurred_day, source_ip, country_code, path, stored_bytes, body)
     SELECT e.seq, e.id, e.tenant_id, e.config_id, e.type, e.action, e.occurred_at, ${daySql('postgres', 'e.occurred_at')}, e.source_ip,
            e.country_code, e.path,
            OCTET_LENGTH(e.body) + ${EVENT_ROW_OVERHEAD_BYTES}
              + ${RULE_ROW_BYTES} * (SELECT COUNT(*) FROM insight_event_rules_unpartitioned r WHERE r.event_seq = e.seq),
            e.body
     FROM insight_events_unpartitioned e ORDER BY e.seq`,
    `INSERT INTO insight_event_rules (event_seq, tenant_id, config_id, action, occurred_at, occurred_day, rule_id, rule_name)
     SELECT r.event_seq, r.tenant_id, r.config_id, r.action, r.occurred_at, ${daySql('postgres', 'r.occurred_at')}, r.rule_id, r.rule_name
     FROM insight_event_rules_unpartitioned r`,
    `DROP TABLE insight_event_rules_unpartitioned`,
    `DROP TABLE insight_events_unpartitioned`,
    // The export: a tenant's events in (xid, seq) order, all types or one.
    `CREATE INDEX insight_events_tenant_xid ON insight_events (tenant_id, xid, seq)`,
    `CREATE INDEX insight_events_tenant_type_xid ON insight_events (tenant_id, type, xid, seq)`,
    // A cursor's event, an episode update; eviction, oldest first.
    `CREATE INDEX insight_events_id ON insight_events (id)`,
    `CREATE INDEX insight_events_tenant_seq ON insight_events (tenant_id, seq)`,
    // Dashboards, as before.
    `CREATE INDEX insight_events_time ON insight_events (tenant_id, type, occurred_at, seq)`,
    `CREATE INDEX insight_events_config_time ON insight_events (tenant_id, config_id, type, occurred_at, seq)`,
    `CREATE INDEX insight_event_rules_time ON insight_event_rules (tenant_id, occurred_at)`,
    `CREATE INDEX insight_event_rules_rule ON insight_event_rules (tenant_id, rule_id, occurred_at)`,
    usageTable,
    usageBackfill,
  ];
}

export const LATEST_MIGRATION = MIGRATIONS.at(-1)!.id;

/** The last migration applied to a store (0: none, an empty database). */
export async function schemaVersion(db: Queryable): Promise<number> {
  const table =
    db.dialect === 'postgres'
      ? await db.one<{ name: string | null }>("SELECT to_regclass('schema_migrations')::text AS name")
      : await db.one<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'");
  if (!table?.name) return 0;
  const row = await db.one<{ version: number | null }>('SELECT MAX(id) AS version FROM schema_migrations');
  return Number(row?.version ?? 0);
}

/** Brings the schema up to date (`upTo`: only up to that migration, for tests of stores written before the rest). */
export async function migrate(db: Db, options: { upTo?: number } = {}): Promise<void> {
  await db.transaction(async (tx) => {
    if (tx.dialect === 'postgres') {
      // Several nodes may start at once: one migrates, the others wait here and then find it done.
      await tx.run('SELECT pg_advisory_xact_lock(7349001)');
    }
    await tx.run('CREATE TABLE IF NOT EXISTS schema_migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)');
    const applied = new Set((await tx.all<{ id: number }>('SELECT id FROM schema_migrations')).map((row) => Number(row.id)));
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.id) || migration.id > (options.upTo ?? Number.POSITIVE_INFINITY)) continue;
      await applyMigration(tx, migration);
    }
  });
}

async function applyMigration(tx: Queryable, migration: Migration): Promise<void> {
  for (const statement of migration.statements(tx.dialect)) await tx.run(statement);
  await tx.run('INSERT INTO schema_migrations (id, name, applied_at) VALUES (?, ?, ?)', [
    migration.id,
    migration.name,
    new Date().toISOString(),
  ]);
}
