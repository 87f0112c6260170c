/** The revocation lists of CA certificate entries, fetched by src/certs/crl.ts and served by the edge. */
import type { CrlStatus } from '@tps/model';
import type { Db } from './db.ts';
import { bumpRevision } from './revision.ts';
import { writeCrlStatus } from './ca-certificates.ts';

export interface CrlCacheRecord {
  caCertificateId: string;
  entryIndex: number;
  crlUrl: string;
  /** The last good CRL (verified as signed by its CA), PEM; null while none was fetched. */
  crlPem: string | null;
  thisUpdate: string | null;
  nextUpdate: string | null;
  fetchedAt: string | null;
  attemptedAt: string | null;
  lastError: string | null;
}

interface CrlRow {
  ca_certificate_id: string;
  entry_index: number;
  crl_url: string;
  crl_pem: string | null;
  this_update: string | null;
  next_update: string | null;
  fetched_at: string | null;
  attempted_at: string | null;
  last_error: string | null;
}

const crlFromRow = (row: CrlRow): CrlCacheRecord => ({
  caCertificateId: row.ca_certificate_id,
  entryIndex: Number(row.entry_index),
  crlUrl: row.crl_url,
  crlPem: row.crl_pem,
  thisUpdate: row.this_update,
  nextUpdate: row.next_update,
  fetchedAt: row.fetched_at,
  attemptedAt: row.attempted_at,
  lastError: row.last_error,
});

/** The last good CRL of each CA entry, shared by every node. */
export class CrlCacheRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async list(caCertificateIds: readonly string[]): Promise<CrlCacheRecord[]> {
    if (caCertificateIds.length === 0) return [];
    const rows = await this.db.all<CrlRow>(
      `SELECT * FROM crl_cache WHERE ca_certificate_id IN (${caCertificateIds.map(() => '?').join(',')}) ORDER BY ca_certificate_id, entry_index`,
      [...caCertificateIds],
    );
    return rows.map(crlFromRow);
  }

  async listAll(): Promise<CrlCacheRecord[]> {
    return (await this.db.all<CrlRow>('SELECT * FROM crl_cache ORDER BY ca_certificate_id, entry_index')).map(crlFromRow);
  }

  /**
   * A verified CRL was fetched: stored with its status (`status`, shown by the CA certificate). The
   * revision moves only when the CRL differs from the one in use, since the edge then has to load it.
   */
  async recordSuccess(
    key: { caCertificateId: string; entryIndex: number; crlUrl: string },
    crl: { pem: string; thisUpdate: string; nextUpdate: string | null },
    at: string,
    status: CrlStatus,
  ): Promise<{ changed: boolean }> {
    return this.db.transaction(async (tx) => {
      const current = await tx.one<CrlRow>('SELECT * FROM crl_cache WHERE ca_certificate_id = ? AND entry_index = ?', [
        key.caCertificateId,
        key.entryIndex,
      ]);
      const changed = current?.crl_pem !== crl.pem;
      await tx.run(
        `INSERT INTO crl_cache (ca_certificate_id, entry_index, crl_url, crl_pem, this_update, next_update, fetched_at, attempted_at, last_error)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)
         ON CONFLICT (ca_certificate_id, entry_index) DO UPDATE SET crl_url = excluded.crl_url, crl_pem = excluded.crl_pem,
           this_update = excluded.this_update, next_update = excluded.next_update, fetched_at = excluded.fetched_at,
           attempted_at = excluded.attempted_at, last_error = NULL`,
        [key.caCertificateId, key.entryIndex, key.crlUrl, crl.pem, crl.thisUpdate, crl.nextUpdate, at, at],
      );
      await writeCrlStatus(tx, key.caCertificateId, key.entryIndex, status);
      if (changed) await bumpRevision(tx);
      return { changed };
    });
  }

  /** A fetch failed: the error is kept next to the last good CRL, which stays in use; `status` as recordSuccess. */
  async recordFailure(
    key: { caCertificateId: string; entryIndex: number; crlUrl: string },
    error: string,
    at: string,
    status: CrlStatus,
  ): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.run(
        `INSERT INTO crl_cache (ca_certificate_id, entry_index, crl_url, attempted_at, last_error) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (ca_certificate_id, entry_index) DO UPDATE SET crl_url = excluded.crl_url, attempted_at = excluded.attempted_at,
           last_error = excluded.last_error`,
        [key.caCertificateId, key.entryIndex, key.crlUrl, at, error],
      );
      await writeCrlStatus(tx, key.caCertificateId, key.entryIndex, status);
    });
  }

  /** Drops the CRLs of CA certificates that were deleted. */
  async purgeOrphans(): Promise<void> {
    await this.db.run('DELETE FROM crl_cache WHERE ca_certificate_id NOT IN (SELECT id FROM ca_certificates)');
  }
}
