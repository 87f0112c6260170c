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

const autoIncrementKey = (dialect: Dialect) =>
  dialect === 'postgres' ? 'BIGSERIAL PRIMARY KEY' : 'INTEGER PRIMARY KEY AUTOINCREMENT';

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
];

export const LATEST_MIGRATION = MIGRATIONS.at(-1)!.id;

export async function migrate(db: Db): Promise<void> {
  await db.transaction(async (tx) => {
    if (tx.dialect === 'postgres') {
      // Several nodes may start at once: one migrates, the others wait here and then find it done.
      await tx.run('SELECT pg_advisory_xact_lock(7349001)');
    }
    await tx.run(
      'CREATE TABLE IF NOT EXISTS schema_migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
    );
    const applied = new Set((await tx.all<{ id: number }>('SELECT id FROM schema_migrations')).map((row) => Number(row.id)));
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.id)) continue;
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
