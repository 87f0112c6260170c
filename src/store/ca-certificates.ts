/**
 * CA certificates: each resource holds up to 50 CA certificates (entries) that validate client
 * certificates and origin certificates, with the state of their revocation lists.
 */
import crypto from 'node:crypto';
import type { CaCertificateEntry, CrlStatus } from '@tps/model';
import type { Db, Queryable } from './db.ts';
import { bumpRevision } from './revision.ts';
import { DEFAULT_QUOTAS, countRows, enforceQuota, type TenantQuotas } from './quotas.ts';
import { deleteUnreferenced, type DeleteOutcome } from './referenced-resources.ts';

export interface CaCertificateRecord {
  id: string;
  tenantId: string;
  entries: CaCertificateEntry[];
  createdAt: string;
  updatedAt: string;
}

interface CaRow {
  id: string;
  tenant_id: string;
  entries: string;
  created_at: string;
  updated_at: string;
}

const caFromRow = (row: CaRow): CaCertificateRecord => ({
  id: row.id,
  tenantId: row.tenant_id,
  entries: JSON.parse(row.entries) as CaCertificateEntry[],
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

export class CaCertificateRepository {
  readonly db: Db;
  readonly #quotas: TenantQuotas;
  constructor(db: Db, quotas: TenantQuotas = DEFAULT_QUOTAS) {
    this.db = db;
    this.#quotas = quotas;
  }

  async create(tenantId: string, entries: CaCertificateEntry[]): Promise<CaCertificateRecord> {
    return this.db.transaction(async (tx) => {
      await enforceQuota(
        tx,
        tenantId,
        { limit: this.#quotas.caCertificates, resource: 'CA certificates', setting: 'TPS_QUOTA_CA_CERTIFICATES' },
        countRows('ca_certificates', tenantId),
      );
      const now = new Date().toISOString();
      const record = { id: crypto.randomUUID(), tenantId, entries, createdAt: now, updatedAt: now };
      await tx.run('INSERT INTO ca_certificates (id, tenant_id, entries, created_at, updated_at) VALUES (?, ?, ?, ?, ?)', [
        record.id,
        tenantId,
        JSON.stringify(entries),
        now,
        now,
      ]);
      await bumpRevision(tx);
      return record;
    });
  }

  async get(tenantId: string, id: string): Promise<CaCertificateRecord | undefined> {
    const row = await this.db.one<CaRow>('SELECT * FROM ca_certificates WHERE id = ? AND tenant_id = ?', [id, tenantId]);
    return row && caFromRow(row);
  }

  async getAny(id: string): Promise<CaCertificateRecord | undefined> {
    const row = await this.db.one<CaRow>('SELECT * FROM ca_certificates WHERE id = ?', [id]);
    return row && caFromRow(row);
  }

  async list(tenantId: string): Promise<CaCertificateRecord[]> {
    return (await this.db.all<CaRow>('SELECT * FROM ca_certificates WHERE tenant_id = ? ORDER BY created_at, id', [tenantId])).map(
      caFromRow,
    );
  }

  /** Deletes the CA certificate unless a proxy refers to it; then nothing changes and the proxies are named. */
  async delete(tenantId: string, id: string): Promise<DeleteOutcome> {
    return deleteUnreferenced(this.db, 'ca_certificates', tenantId, id);
  }

  /** Every tenant's CA certificates: what the CRL refresher looks after. */
  async listAll(): Promise<CaCertificateRecord[]> {
    return (await this.db.all<CaRow>('SELECT * FROM ca_certificates ORDER BY created_at, id')).map(caFromRow);
  }
}

/**
 * Shows the state of an entry's CRL in the CA certificate resource (`certificates[].crl`), in the
 * transaction that stores the CRL: the edge and the API never see one without the other.
 */
export async function writeCrlStatus(tx: Queryable, id: string, entryIndex: number, status: CrlStatus): Promise<void> {
  // The entries are one JSON value, and the entries of one CA certificate are fetched at the same
  // time (and by every node): the row is locked so that no status overwrites another's. SQLite runs
  // one transaction at a time already.
  const lock = tx.dialect === 'postgres' ? ' FOR UPDATE' : '';
  const row = await tx.one<CaRow>(`SELECT * FROM ca_certificates WHERE id = ?${lock}`, [id]);
  if (!row) return;
  const entries = JSON.parse(row.entries) as CaCertificateEntry[];
  const entry = entries[entryIndex];
  if (!entry) return;
  entry.crl = status;
  await tx.run('UPDATE ca_certificates SET entries = ? WHERE id = ?', [JSON.stringify(entries), id]);
}
