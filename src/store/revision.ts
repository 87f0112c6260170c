import type { Queryable } from './db.ts';

/**
 * The store revision grows by one with every change an edge node must apply (configurations,
 * certificates, CA certificates). Edge nodes poll it, and reload only when it moved.
 */
export async function bumpRevision(tx: Queryable): Promise<number> {
  const row = await tx.one<{ revision: number }>(
    'UPDATE store_revision SET revision = revision + 1 WHERE singleton = 1 RETURNING revision',
  );
  return Number(row!.revision);
}

export async function currentRevision(db: Queryable): Promise<number> {
  const row = await db.one<{ revision: number }>('SELECT revision FROM store_revision WHERE singleton = 1');
  return Number(row?.revision ?? 0);
}
