/**
 * Every sealed private key of the store, wherever it lives (certificates, signing keys, ACME
 * accounts), for the start-up pass that re-seals unbound (v1) values for their own rows
 * (src/certs/upgrade-sealed-secrets.ts).
 */
import type { Db } from './db.ts';
import type { SealBinding } from '../certs/secret-box.ts';

export interface StoredSealedSecret {
  binding: SealBinding;
  sealed: string;
}

interface Source {
  table: SealBinding['table'];
  /** SELECT of (id, tenant_id, sealed) for the rows whose value starts with a prefix. */
  select: string;
  /** UPDATE of one row's value, only while it still holds the value read (another node may have upgraded it). */
  update: string;
}

const SOURCES: Source[] = [
  {
    table: 'certificates',
    select: 'SELECT id, tenant_id, private_key AS sealed FROM certificates WHERE private_key LIKE ? ORDER BY id',
    update: 'UPDATE certificates SET private_key = ? WHERE id = ? AND tenant_id = ? AND private_key = ?',
  },
  {
    table: 'signing_keys',
    select: 'SELECT kid AS id, NULL AS tenant_id, private_key AS sealed FROM signing_keys WHERE private_key LIKE ? ORDER BY kid',
    update: 'UPDATE signing_keys SET private_key = ? WHERE kid = ? AND private_key = ?',
  },
  {
    table: 'acme_accounts',
    select:
      'SELECT directory_url AS id, tenant_id, private_key AS sealed FROM acme_accounts WHERE private_key LIKE ? ORDER BY directory_url, tenant_id',
    update: 'UPDATE acme_accounts SET private_key = ? WHERE directory_url = ? AND tenant_id = ? AND private_key = ?',
  },
];

export class SealedSecretRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  /** Sealed values whose text starts with `prefix` (a format version such as "v1:"). */
  async withPrefix(prefix: string): Promise<StoredSealedSecret[]> {
    const found: StoredSealedSecret[] = [];
    for (const source of SOURCES) {
      const rows = await this.db.all<{ id: string; tenant_id: string | null; sealed: string }>(source.select, [`${prefix}%`]);
      for (const row of rows) {
        found.push({
          binding: { table: source.table, id: row.id, ...(row.tenant_id !== null && { tenantId: row.tenant_id }) },
          sealed: row.sealed,
        });
      }
    }
    return found;
  }

  /** Replaces one row's sealed value if it still holds `previous`; false when it changed meanwhile. */
  async replace(secret: StoredSealedSecret, next: string): Promise<boolean> {
    const source = SOURCES.find((candidate) => candidate.table === secret.binding.table)!;
    const { id, tenantId } = secret.binding;
    const params = source.table === 'signing_keys' ? [next, id, secret.sealed] : [next, id, tenantId ?? '', secret.sealed];
    return (await this.db.run(source.update, params)) > 0;
  }
}
