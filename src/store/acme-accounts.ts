/** ACME accounts: one per tenant and directory URL, their keys sealed (src/certs/acme.ts uses them). */
import type { Db } from './db.ts';

export interface AcmeAccountRecord {
  directoryUrl: string;
  tenantId: string;
  email: string | null;
  accountUrl: string;
  /** The account key, sealed with the master key. */
  sealedPrivateKey: string;
  createdAt: string;
  updatedAt: string;
}

interface AcmeAccountRow {
  directory_url: string;
  tenant_id: string;
  email: string | null;
  account_url: string;
  private_key: string;
  created_at: string;
  updated_at: string;
}

const accountFromRow = (row: AcmeAccountRow): AcmeAccountRecord => ({
  directoryUrl: row.directory_url,
  tenantId: row.tenant_id,
  email: row.email,
  accountUrl: row.account_url,
  sealedPrivateKey: row.private_key,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/**
 * One ACME account per tenant and directory URL, shared by every node: the CA's per-account
 * limits (orders, failed validations, pending authorizations) then count one tenant's orders only.
 */
export class AcmeAccountRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async get(directoryUrl: string, tenantId: string): Promise<AcmeAccountRecord | undefined> {
    const row = await this.db.one<AcmeAccountRow>('SELECT * FROM acme_accounts WHERE directory_url = ? AND tenant_id = ?', [
      directoryUrl,
      tenantId,
    ]);
    return row && accountFromRow(row);
  }

  /** Every tenant's account at the directory. */
  async list(directoryUrl: string): Promise<AcmeAccountRecord[]> {
    const rows = await this.db.all<AcmeAccountRow>('SELECT * FROM acme_accounts WHERE directory_url = ? ORDER BY created_at, tenant_id', [
      directoryUrl,
    ]);
    return rows.map(accountFromRow);
  }

  /** Stores a newly registered account unless another node stored one first; answers the one kept. */
  async add(account: {
    directoryUrl: string;
    tenantId: string;
    email: string | null;
    accountUrl: string;
    sealedPrivateKey: string;
  }): Promise<AcmeAccountRecord> {
    const now = new Date().toISOString();
    await this.db.run(
      `INSERT INTO acme_accounts (directory_url, tenant_id, email, account_url, private_key, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (directory_url, tenant_id) DO NOTHING`,
      [account.directoryUrl, account.tenantId, account.email, account.accountUrl, account.sealedPrivateKey, now, now],
    );
    return (await this.get(account.directoryUrl, account.tenantId))!;
  }

  async updateEmail(directoryUrl: string, tenantId: string, email: string | null): Promise<void> {
    await this.db.run('UPDATE acme_accounts SET email = ?, updated_at = ? WHERE directory_url = ? AND tenant_id = ?', [
      email,
      new Date().toISOString(),
      directoryUrl,
      tenantId,
    ]);
  }

  /** Forgets an account the CA deactivated (only that one: another node may have replaced it already). */
  async forget(directoryUrl: string, tenantId: string, accountUrl: string): Promise<void> {
    await this.db.run('DELETE FROM acme_accounts WHERE directory_url = ? AND tenant_id = ? AND account_url = ?', [
      directoryUrl,
      tenantId,
      accountUrl,
    ]);
  }
}
