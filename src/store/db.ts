/**
 * One SQL code path, two dialects: the embedded SQLite file (single node, zero setup) and
 * PostgreSQL (several nodes sharing one control plane). Queries are written once with `?`
 * placeholders; values are strings, numbers, booleans-as-integers and JSON text, which both
 * dialects store alike.
 */
import { DatabaseSync, type SQLInputValue } from 'node:sqlite';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';

export type SqlValue = string | number | null;
export type Row = Record<string, unknown>;
export type Dialect = 'sqlite' | 'postgres';

export interface Queryable {
  readonly dialect: Dialect;
  all<T = Row>(sql: string, params?: readonly SqlValue[]): Promise<T[]>;
  one<T = Row>(sql: string, params?: readonly SqlValue[]): Promise<T | undefined>;
  /** Runs a statement; returns how many rows it changed. */
  run(sql: string, params?: readonly SqlValue[]): Promise<number>;
}

export interface Db extends Queryable {
  /** Runs `work` in one transaction: all of it or nothing. */
  transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** A unique constraint refused the write (both dialects report it through this). */
export class UniqueViolation extends Error {
  readonly constraint: string;
  constructor(constraint: string) {
    super(`unique constraint violated: ${constraint}`);
    this.constraint = constraint;
  }
}

/** The SQLite store's file in a data folder. */
export function sqliteFile(dataDir: string): string {
  return path.join(dataDir, 'tps.sqlite');
}

export async function openDb(options: { databaseUrl?: string | undefined; dataDir: string; poolSize?: number }): Promise<Db> {
  if (options.databaseUrl) return openPostgres(options.databaseUrl, options.poolSize ?? 10);
  fs.mkdirSync(options.dataDir, { recursive: true });
  return openSqlite(sqliteFile(options.dataDir));
}

// ---------------------------------------------------------------------------------------------
// SQLite (node:sqlite). The driver is synchronous; a queue keeps a transaction's statements from
// interleaving with other callers' statements on the same connection.

class Mutex {
  #tail: Promise<void> = Promise.resolve();
  lock<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(work);
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}

function sqliteQueryable(db: DatabaseSync): Queryable {
  const statements = new Map<string, ReturnType<DatabaseSync['prepare']>>();
  const prepare = (sql: string) => {
    let statement = statements.get(sql);
    if (!statement) {
      statement = db.prepare(sql);
      statements.set(sql, statement);
    }
    return statement;
  };
  const wrap = <T>(work: () => T): T => {
    try {
      return work();
    } catch (error) {
      const message = (error as Error).message ?? '';
      const unique = /UNIQUE constraint failed: (.*)$/.exec(message);
      if (unique) throw new UniqueViolation(unique[1] ?? 'unknown');
      throw error;
    }
  };
  return {
    dialect: 'sqlite',
    all: async <T>(sql: string, params: readonly SqlValue[] = []) => wrap(() => prepare(sql).all(...(params as SQLInputValue[])) as T[]),
    one: async <T>(sql: string, params: readonly SqlValue[] = []) =>
      wrap(() => prepare(sql).get(...(params as SQLInputValue[])) as T | undefined),
    run: async (sql: string, params: readonly SqlValue[] = []) =>
      wrap(() => Number(prepare(sql).run(...(params as SQLInputValue[])).changes)),
  };
}

function openSqlite(file: string): Db {
  const db = new DatabaseSync(file);
  // WAL lets the CLI and a running server use the same file; busy_timeout makes them wait, not fail.
  db.exec('PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;');
  const base = sqliteQueryable(db);
  const mutex = new Mutex();
  return {
    dialect: 'sqlite',
    all: (sql, params) => mutex.lock(() => base.all(sql, params)),
    one: (sql, params) => mutex.lock(() => base.one(sql, params)),
    run: (sql, params) => mutex.lock(() => base.run(sql, params)),
    transaction: (work) =>
      mutex.lock(async () => {
        db.exec('BEGIN IMMEDIATE');
        try {
          const result = await work(base);
          db.exec('COMMIT');
          return result;
        } catch (error) {
          db.exec('ROLLBACK');
          throw error;
        }
      }),
    close: async () => {
      await mutex.lock(async () => db.close());
    },
  };
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL (pg). `?` placeholders become `$1..$n`; BIGINT comes back as a JS number.

pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

const placeholderCache = new Map<string, string>();
function toPostgres(sql: string): string {
  let converted = placeholderCache.get(sql);
  if (converted === undefined) {
    let n = 0;
    converted = sql.replace(/\?/g, () => `$${++n}`);
    placeholderCache.set(sql, converted);
  }
  return converted;
}

function postgresQueryable(client: pg.Pool | pg.PoolClient): Queryable {
  const query = async (sql: string, params: readonly SqlValue[]) => {
    try {
      return await client.query(toPostgres(sql), params as SqlValue[]);
    } catch (error) {
      const pgError = error as { code?: string; constraint?: string };
      if (pgError.code === '23505') throw new UniqueViolation(pgError.constraint ?? 'unknown');
      throw error;
    }
  };
  return {
    dialect: 'postgres',
    all: async <T>(sql: string, params: readonly SqlValue[] = []) => (await query(sql, params)).rows as T[],
    one: async <T>(sql: string, params: readonly SqlValue[] = []) => (await query(sql, params)).rows[0] as T | undefined,
    run: async (sql: string, params: readonly SqlValue[] = []) => (await query(sql, params)).rowCount ?? 0,
  };
}

async function openPostgres(url: string, poolSize: number): Promise<Db> {
  const pool = new pg.Pool({ connectionString: url, max: poolSize });
  // A broken idle connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  await pool.query('SELECT 1');
  const base = postgresQueryable(pool);
  return {
    ...base,
    transaction: async (work) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await work(postgresQueryable(client));
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}
