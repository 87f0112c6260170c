import crypto from 'node:crypto';
import type { Db } from './db.ts';

export const SCOPES = ['read', 'write', 'insight'] as const;
export type Scope = (typeof SCOPES)[number];

export interface ServiceAccount {
  id: string;
  tenantId: string;
  name: string;
  clientId: string;
  scopes: Scope[];
  createdAt: string;
  revokedAt: string | null;
}

/** Claims of the last token issued, so that a request within the reuse window gets the same token. */
export interface LastToken {
  iat: number;
  exp: number;
  jti: string;
  kid: string;
  scopes: string;
}

interface Row {
  id: string;
  tenant_id: string;
  name: string;
  client_id: string;
  secret_hash: string;
  scopes: string;
  created_at: string;
  revoked_at: string | null;
  last_token: string | null;
}

const fromRow = (row: Row): ServiceAccount => ({
  id: row.id,
  tenantId: row.tenant_id,
  name: row.name,
  clientId: row.client_id,
  scopes: row.scopes.split(',').filter(Boolean) as Scope[],
  createdAt: row.created_at,
  revokedAt: row.revoked_at,
});

/**
 * Client secrets are 256 random bits, so a single SHA-256 is a sound one-way hash for them (as for
 * API tokens elsewhere); a slow password hash would only slow the token endpoint down.
 */
const hashSecret = (secret: string) => crypto.createHash('sha256').update(secret).digest('hex');

export class ServiceAccountRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  /** Creates an account; the returned secret exists nowhere else: only its hash is stored. */
  async create(tenantId: string, name: string, scopes: readonly Scope[]): Promise<ServiceAccount & { clientSecret: string }> {
    const account: ServiceAccount = {
      id: crypto.randomUUID(),
      tenantId,
      name,
      clientId: crypto.randomUUID(),
      scopes: SCOPES.filter((scope) => scopes.includes(scope)),
      createdAt: new Date().toISOString(),
      revokedAt: null,
    };
    const clientSecret = `tps_${crypto.randomBytes(32).toString('base64url')}`;
    await this.db.run(
      `INSERT INTO service_accounts (id, tenant_id, name, client_id, secret_hash, scopes, created_at)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
      [account.id, tenantId, name, account.clientId, hashSecret(clientSecret), account.scopes.join(','), account.createdAt],
    );
    return { ...account, clientSecret };
  }

  /** The account behind valid, unrevoked credentials, with the last token issued to it. */
  async authenticate(
    clientId: string,
    clientSecret: string,
  ): Promise<{ account: ServiceAccount; lastToken: LastToken | null } | undefined> {
    const row = await this.db.one<Row>('SELECT * FROM service_accounts WHERE client_id = ?', [clientId]);
    // Compare hashes in constant time; hash even when the account is unknown so timing says nothing.
    const expected = Buffer.from(row?.secret_hash ?? hashSecret('unknown'), 'hex');
    const given = Buffer.from(hashSecret(clientSecret), 'hex');
    if (!row || !crypto.timingSafeEqual(expected, given) || row.revoked_at !== null) return undefined;
    return { account: fromRow(row), lastToken: row.last_token ? (JSON.parse(row.last_token) as LastToken) : null };
  }

  async recordToken(clientId: string, token: LastToken): Promise<void> {
    await this.db.run('UPDATE service_accounts SET last_token = ? WHERE client_id = ?', [JSON.stringify(token), clientId]);
  }

  async getByClientId(clientId: string): Promise<ServiceAccount | undefined> {
    const row = await this.db.one<Row>('SELECT * FROM service_accounts WHERE client_id = ?', [clientId]);
    return row && fromRow(row);
  }

  async list(tenantId: string): Promise<ServiceAccount[]> {
    return (await this.db.all<Row>('SELECT * FROM service_accounts WHERE tenant_id = ? ORDER BY created_at', [tenantId])).map(fromRow);
  }

  /** Revokes an account of the tenant: its credentials and every token issued to it stop working. */
  async revoke(tenantId: string | undefined, clientId: string): Promise<ServiceAccount | undefined> {
    const params = tenantId === undefined ? [new Date().toISOString(), clientId] : [new Date().toISOString(), clientId, tenantId];
    const tenantClause = tenantId === undefined ? '' : ' AND tenant_id = ?';
    await this.db.run(
      `UPDATE service_accounts SET revoked_at = ?, last_token = NULL WHERE client_id = ? AND revoked_at IS NULL${tenantClause}`,
      params,
    );
    const account = await this.getByClientId(clientId);
    return account && (tenantId === undefined || account.tenantId === tenantId) ? account : undefined;
  }
}
