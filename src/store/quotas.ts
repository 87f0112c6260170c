/**
 * Per-tenant quotas on what a tenant can make the service hold (proxies, certificates, CA
 * certificates): operator settings, checked inside the write transaction that creates the
 * resource, so two concurrent creates cannot both take the last slot.
 */
import type { Queryable } from './db.ts';
import { ConflictError, type ConflictCode } from './errors.ts';

export const QUOTA_EXCEEDED = 'QUOTA_EXCEEDED' satisfies ConflictCode;

export interface TenantQuotas {
  /** Traffic configurations (each is a listener on every worker of every edge node). */
  proxies: number;
  /** Certificates, customer-uploaded and service-issued alike. */
  certificates: number;
  /** CA certificate resources. */
  caCertificates: number;
}

export const DEFAULT_QUOTAS: TenantQuotas = { proxies: 100, certificates: 100, caCertificates: 50 };

export interface Quota {
  limit: number;
  /** How the error names the resources: "proxies". */
  resource: string;
  /** The operator setting that raises it. */
  setting: string;
}

/** 409 QUOTA_EXCEEDED: the tenant holds as many of `resource` as its quota allows. */
export class QuotaExceededError extends ConflictError {
  readonly resource: string;
  constructor(quota: Quota, used: number) {
    super(
      QUOTA_EXCEEDED,
      `the account holds ${used} ${quota.resource}, its quota is ${quota.limit}: delete some first or ask the operator to raise ${quota.setting}`,
      '/data',
    );
    this.resource = quota.resource;
  }
}

/**
 * Makes the tenant's creates take turns until the transaction ends, so that the count that follows
 * sees every create committed before. SQLite: BEGIN IMMEDIATE already holds the database's write
 * lock. PostgreSQL: a row lock on the tenant that does not block foreign-key checks (NO KEY).
 */
export async function lockTenant(tx: Queryable, tenantId: string): Promise<void> {
  if (tx.dialect === 'postgres') await tx.one('SELECT id FROM tenants WHERE id = ? FOR NO KEY UPDATE', [tenantId]);
}

/**
 * Throws 409 QUOTA_EXCEEDED (pointer /data) when the tenant already holds `quota.limit` resources.
 * Call inside the transaction that creates the resource, before the insert.
 */
export async function enforceQuota(
  tx: Queryable,
  tenantId: string,
  quota: Quota,
  count: (tx: Queryable) => Promise<number>,
): Promise<void> {
  await lockTenant(tx, tenantId);
  const used = await count(tx);
  if (used >= quota.limit) throw new QuotaExceededError(quota, used);
}

/** Counts a tenant's rows of a table (the tables' tenant index makes this cheap). */
export const countRows =
  (table: 'traffic_configs' | 'certificates' | 'ca_certificates', tenantId: string) =>
  async (tx: Queryable): Promise<number> =>
    Number((await tx.one<{ n: number }>(`SELECT COUNT(*) AS n FROM ${table} WHERE tenant_id = ?`, [tenantId]))?.n ?? 0);
