/**
 * `tps backup FILE` and `tps restore FILE` for the SQLite store. The backup is a consistent copy
 * made while the service runs (`VACUUM INTO` reads one snapshot of the WAL database; writers go on).
 * It holds everything but the master key: private keys inside it stay sealed under that key, which
 * is kept apart (TPS_MASTER_KEY or DATA_DIR/master.key). A restore checks the backup's schema
 * version and that its private keys open with the master key the restored service will use.
 * PostgreSQL stores are backed up with pg_dump; these commands say how and check the schema version.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { DatabaseSync, backup as sqliteBackup } from 'node:sqlite';
import type { Settings } from '../config/settings.ts';
import { openDb, sqliteFile } from '../store/db.ts';
import { LATEST_MIGRATION, schemaVersion } from '../store/migrations.ts';
import { openStore, type Store } from '../store/index.ts';
import { EDGE_NODE_TIMEOUT_MS } from '../store/edge-status.ts';
import { SecretBox } from '../certs/secret-box.ts';
import { CliError } from './output.ts';

/** What a store holds, to compare a backup with its source and a restore with its backup. */
export interface StoreCounts {
  tenants: number;
  serviceAccounts: number;
  portalUsers: number;
  trafficConfigs: number;
  certificates: number;
  caCertificates: number;
  insightEvents: number;
}

export interface MasterKeyNote {
  /** Where the key the backed-up service uses is. */
  source: 'TPS_MASTER_KEY' | 'file' | 'none';
  file?: string;
  /** First 16 hex digits of the key's SHA-256: tells which key belongs to which backup, without revealing it. */
  fingerprint?: string;
  note: string;
}

export interface BackupReport {
  file: string;
  bytes: number;
  schemaVersion: number;
  counts: StoreCounts;
  masterKey: MasterKeyNote;
}

export interface RestoreReport {
  file: string;
  store: string;
  /** The backup's schema version, and the store's after this tps migrated it. */
  schemaVersion: { backup: number; restored: number };
  counts: StoreCounts;
  /** How many sealed private keys were opened with the master key. */
  privateKeysChecked: number;
}

const COUNTED: Record<keyof StoreCounts, string> = {
  tenants: 'tenants',
  serviceAccounts: 'service_accounts',
  portalUsers: 'portal_users',
  trafficConfigs: 'traffic_configs',
  certificates: 'certificates',
  caCertificates: 'ca_certificates',
  insightEvents: 'insight_events',
};

export async function backupStore(settings: Settings, file: string, options: { force: boolean }): Promise<BackupReport> {
  if (settings.databaseUrl) await refuseForPostgres(settings.databaseUrl, 'backup', file);
  const source = sqliteFile(settings.dataDir);
  if (!fs.existsSync(source)) throw new CliError('NO_STORE', `there is no store at ${source} (set --data-dir or TPS_DATA_DIR)`);
  const target = path.resolve(file);
  if (fs.existsSync(target) && !options.force) throw new CliError('FILE_EXISTS', `${target} exists; give --force to replace it`);
  fs.mkdirSync(path.dirname(target), { recursive: true });
  const partial = path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.partial`);
  fs.rmSync(partial, { force: true });

  // Read-only: the backup never writes to the live store (only SQLite's shared-memory index).
  const live = new DatabaseSync(source, { readOnly: true });
  try {
    live.exec('PRAGMA busy_timeout = 10000');
    live.prepare('VACUUM INTO ?').run(partial);
  } catch (error) {
    fs.rmSync(partial, { force: true });
    throw new CliError('BACKUP_FAILED', `copying ${source} failed: ${(error as Error).message}`);
  } finally {
    live.close();
    keepOwner(source);
  }
  let version: number;
  let counts: StoreCounts;
  const copy = new DatabaseSync(partial);
  try {
    const integrity = copy.prepare('PRAGMA integrity_check').get() as { integrity_check: string };
    if (integrity.integrity_check !== 'ok')
      throw new CliError('BACKUP_FAILED', `the copy fails SQLite's integrity check: ${integrity.integrity_check}`);
    version = sqliteSchemaVersion(copy);
    counts = countRows(copy);
  } catch (error) {
    copy.close();
    fs.rmSync(partial, { force: true });
    throw error;
  }
  copy.close();
  // It holds password and secret hashes and sealed keys: for its owner's eyes only.
  fs.chmodSync(partial, 0o600);
  fs.renameSync(partial, target);
  return { file: target, bytes: fs.statSync(target).size, schemaVersion: version, counts, masterKey: masterKeyNote(settings) };
}

export async function restoreStore(settings: Settings, file: string, options: { force: boolean }): Promise<RestoreReport> {
  if (settings.databaseUrl) await refuseForPostgres(settings.databaseUrl, 'restore', file);
  const backupFile = path.resolve(file);
  if (!fs.existsSync(backupFile)) throw new CliError('NO_BACKUP', `there is no file ${backupFile}`);
  let source: DatabaseSync;
  try {
    source = new DatabaseSync(backupFile, { readOnly: true });
    source.prepare('SELECT 1 FROM sqlite_master LIMIT 1').get();
  } catch (error) {
    throw new CliError('NOT_A_BACKUP', `${backupFile} is not an SQLite file: ${(error as Error).message}`);
  }
  try {
    const backupVersion = sqliteSchemaVersion(source);
    if (backupVersion === 0) throw new CliError('NOT_A_BACKUP', `${backupFile} is not a tps store (no schema_migrations table)`);
    if (backupVersion > LATEST_MIGRATION) {
      throw new CliError(
        'NEWER_SCHEMA',
        `the backup has schema version ${backupVersion}, newer than this tps knows (${LATEST_MIGRATION}): restore it with the tps version that made it, or a later one`,
        {
          meta: { backupSchemaVersion: backupVersion, schemaVersion: LATEST_MIGRATION },
        },
      );
    }
    const integrity = source.prepare('PRAGMA integrity_check').get() as { integrity_check: string };
    if (integrity.integrity_check !== 'ok')
      throw new CliError('CORRUPT_BACKUP', `${backupFile} fails SQLite's integrity check: ${integrity.integrity_check}`);

    const target = sqliteFile(settings.dataDir);
    if (fs.existsSync(target)) refuseLiveStore(target, options.force);
    const expected = countRows(source);

    // The backup is first copied beside the store and checked there (migrated to this version,
    // its private keys opened): a refused restore leaves the data directory as it was.
    fs.mkdirSync(settings.dataDir, { recursive: true, mode: 0o700 });
    const staging = fs.mkdtempSync(path.join(settings.dataDir, '.restore-'));
    let keysChecked: number;
    let restoredVersion: number;
    try {
      await sqliteBackup(source, sqliteFile(staging));
      source.close();
      const staged = await openStore({ dataDir: staging, databaseUrl: undefined });
      try {
        keysChecked = await checkMasterKey(settings, staged);
        // The running nodes of the backed-up service are not this one's; they report again when they start.
        await staged.db.run('DELETE FROM edge_status');
        await staged.db.run('DELETE FROM edge_nodes');
        restoredVersion = await schemaVersion(staged.db);
      } finally {
        await staged.close();
      }
      const checked = new DatabaseSync(sqliteFile(staging), { readOnly: true });
      try {
        await sqliteBackup(checked, target);
      } finally {
        checked.close();
      }
    } finally {
      fs.rmSync(staging, { recursive: true, force: true });
    }
    fs.chmodSync(target, 0o600);
    const check = new DatabaseSync(target, { readOnly: true });
    const counts = countRows(check);
    check.close();
    keepOwner(target, settings.dataDir);
    if (JSON.stringify(counts) !== JSON.stringify(expected)) {
      throw new CliError(
        'RESTORE_FAILED',
        `the restored store differs from the backup: ${JSON.stringify(counts)} instead of ${JSON.stringify(expected)}`,
      );
    }
    return {
      file: backupFile,
      store: target,
      schemaVersion: { backup: backupVersion, restored: restoredVersion },
      counts,
      privateKeysChecked: keysChecked,
    };
  } finally {
    if (source.isOpen) source.close();
  }
}

/**
 * A store that is open (SQLite removes the -wal file when its last connection closes), that holds
 * tenants, or that a node reported from lately, is overwritten only with --force.
 */
function refuseLiveStore(target: string, force: boolean): void {
  if (force) return;
  if (fs.existsSync(`${target}-wal`)) {
    throw new CliError(
      'STORE_IN_USE',
      `${target} is open (${path.basename(target)}-wal exists): stop the service first, or give --force if no process uses it (a crash leaves that file)`,
    );
  }
  // Read-write, so that closing it (the last connection) removes the side files it makes.
  const existing = new DatabaseSync(target);
  try {
    const tables = new Set(
      (existing.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((row) => row.name),
    );
    const tenants = tables.has('tenants') ? Number((existing.prepare('SELECT COUNT(*) AS n FROM tenants').get() as { n: number }).n) : 0;
    if (tenants > 0) {
      throw new CliError(
        'STORE_NOT_EMPTY',
        `${target} holds ${tenants} tenant(s): restore into a new data directory, or stop the service and give --force to replace it`,
      );
    }
    const recent = tables.has('edge_nodes')
      ? (existing.prepare('SELECT node_id FROM edge_nodes WHERE heartbeat_at >= ?').all(Date.now() - EDGE_NODE_TIMEOUT_MS) as {
          node_id: string;
        }[])
      : [];
    if (recent.length > 0) {
      throw new CliError(
        'STORE_IN_USE',
        `${target} is in use: node ${recent[0]!.node_id} reported within the last ${EDGE_NODE_TIMEOUT_MS / 1000} s; stop the service first (or give --force)`,
      );
    }
  } finally {
    existing.close();
    keepOwner(target);
  }
}

/**
 * The restored service must open the backup's private keys: refuses when the master key it will
 * use (TPS_MASTER_KEY, else DATA_DIR/master.key) is missing or is not the one they were sealed with.
 * Returns how many sealed keys were opened.
 */
async function checkMasterKey(settings: Settings, staged: Store): Promise<number> {
  const sealed = await staged.sealedSecrets.withPrefix('');
  if (sealed.length === 0) return 0;
  const keyFile = path.join(settings.dataDir, 'master.key');
  if (!settings.masterKey && !fs.existsSync(keyFile)) {
    throw new CliError(
      'MASTER_KEY_MISSING',
      `the backup holds ${sealed.length} private key(s) sealed with the backed-up service's master key: copy that key to ${keyFile} (mode 0600) or set TPS_MASTER_KEY, then restore`,
    );
  }
  const box = SecretBox.fromSettings(settings);
  const unreadable = sealed.filter((secret) => {
    try {
      // Opens a value bound to its row, and an older unbound one (re-sealed at the next start).
      box.upgrade(secret.sealed, secret.binding);
      return false;
    } catch {
      return true;
    }
  }).length;
  if (unreadable > 0) {
    throw new CliError(
      'MASTER_KEY_MISMATCH',
      `${unreadable} of the backup's ${sealed.length} private key(s) do not open with the master key of ${settings.masterKey ? 'TPS_MASTER_KEY' : keyFile}: use the backed-up service's master key`,
    );
  }
  return sealed.length;
}

function masterKeyNote(settings: Settings): MasterKeyNote {
  const fingerprint = (key: string) => crypto.createHash('sha256').update(Buffer.from(key.trim(), 'base64')).digest('hex').slice(0, 16);
  const note =
    'The backup does not hold the master key. Without it the private keys in the backup (TLS keys, the token signing key) cannot be opened: keep a copy of the key apart from the backups.';
  if (settings.masterKey) return { source: 'TPS_MASTER_KEY', fingerprint: fingerprint(settings.masterKey), note };
  const file = path.join(settings.dataDir, 'master.key');
  if (!fs.existsSync(file))
    return { source: 'none', note: 'The store has no master key yet (it is made at the first start of tps serve).' };
  return { source: 'file', file, fingerprint: fingerprint(fs.readFileSync(file, 'utf8')), note };
}

async function refuseForPostgres(databaseUrl: string, command: 'backup' | 'restore', file: string): Promise<never> {
  const db = await openDb({ databaseUrl, dataDir: '' }).catch((error: unknown) => {
    throw new CliError('STORE_UNREACHABLE', `cannot reach the PostgreSQL store: ${(error as Error).message}`);
  });
  let version: number;
  try {
    version = await schemaVersion(db);
  } finally {
    await db.close();
  }
  const url = new URL(databaseUrl);
  url.password = '';
  const shownUrl = url.toString();
  const compatibility =
    version > LATEST_MIGRATION
      ? `newer than this tps knows (${LATEST_MIGRATION}): upgrade tps before restoring a dump of it`
      : version < LATEST_MIGRATION
        ? `older than this tps (${LATEST_MIGRATION}): it is migrated at the next start of tps serve`
        : 'the one this tps uses';
  const commandLine =
    command === 'backup'
      ? `pg_dump --format=custom --file=${shellQuote(file)} ${shellQuote(shownUrl)}`
      : `pg_restore --no-owner --exit-on-error --dbname=${shellQuote(shownUrl)} ${shellQuote(file)}`;
  const how =
    command === 'backup'
      ? `the store is PostgreSQL: back it up with pg_dump (a consistent snapshot while the service runs): ${commandLine}`
      : `the store is PostgreSQL: restore a pg_dump into an empty database with pg_restore, then start tps: ${commandLine}`;
  throw new CliError(
    command === 'backup' ? 'USE_PG_DUMP' : 'USE_PG_RESTORE',
    `${how}. The database's schema version is ${version}, ${compatibility}.`,
    {
      meta: { schemaVersion: version, latestSchemaVersion: LATEST_MIGRATION, command: commandLine },
    },
  );
}

const shellQuote = (value: string) => (/^[A-Za-z0-9_./:@=-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`);

function sqliteSchemaVersion(db: DatabaseSync): number {
  if (!hasTable(db, 'schema_migrations')) return 0;
  return Number((db.prepare('SELECT MAX(id) AS version FROM schema_migrations').get() as { version: number | null }).version ?? 0);
}

function hasTable(db: DatabaseSync, name: string): boolean {
  return db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined;
}

function countRows(db: DatabaseSync): StoreCounts {
  const counts = {} as StoreCounts;
  for (const [key, table] of Object.entries(COUNTED) as [keyof StoreCounts, string][]) {
    counts[key] = hasTable(db, table) ? Number((db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n) : 0;
  }
  return counts;
}

/**
 * Run as root (the usual way to reach a service's files), SQLite's side files (-wal, -shm) and a
 * restored store would belong to root, and the service's own user could no longer write them:
 * they get the owner of the store (or of its folder).
 */
function keepOwner(file: string, folder?: string): void {
  if (process.getuid?.() !== 0) return;
  const owner = fs.statSync(folder ?? file);
  for (const candidate of [file, `${file}-wal`, `${file}-shm`]) {
    try {
      const stat = fs.statSync(candidate);
      if (stat.uid !== owner.uid || stat.gid !== owner.gid) fs.chownSync(candidate, owner.uid, owner.gid);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}
