/**
 * What a service-issued certificate order must pass before it is stored (a new order, or a FAILED
 * one ordered again): no domain claimed by another tenant, room in the tenant's quota of pending
 * orders. Run inside the transaction that writes the order.
 */
import type { Queryable } from './db.ts';

/** Bounds on a tenant's service-issued certificates (operator settings). */
export interface AcmeOrderLimits {
  /** PENDING orders a tenant may have at once; absent = no limit. */
  maxPendingOrders?: number;
}

export type AcmeOrderProblemCode = 'DOMAIN_CLAIMED' | 'QUOTA_EXCEEDED';

/** An order the store refused, with one problem per offending domain (or the quota). Nothing was written. */
export class AcmeOrderRefused extends Error {
  readonly problems: { code: AcmeOrderProblemCode; detail: string; pointer: string }[];
  constructor(problems: { code: AcmeOrderProblemCode; detail: string; pointer: string }[]) {
    super(problems.map((problem) => problem.detail).join('; '));
    this.problems = problems;
  }
}

/** An ISSUED certificate past its notAfter claims nothing: the name may have changed hands. */
const LIVE_CLAIM = `c.source = 'ACME' AND (c.status = 'PENDING' OR (c.status = 'ISSUED' AND (c.not_after IS NULL OR c.not_after > ?)))`;

/**
 * Which of `domains` tenants other than `tenantId` claim: they hold a PENDING or an unexpired
 * ISSUED service-issued certificate naming it. Customer certificates claim nothing.
 */
async function claimedByOthers(tx: Queryable, tenantId: string, domains: readonly string[]): Promise<Set<string>> {
  const unique = [...new Set(domains)];
  if (unique.length === 0) return new Set();
  const rows = await tx.all<{ domain: string }>(
    `SELECT DISTINCT d.domain FROM acme_certificate_domains d JOIN certificates c ON c.id = d.certificate_id
     WHERE d.domain IN (${unique.map(() => '?').join(',')}) AND d.tenant_id <> ? AND ${LIVE_CLAIM}`,
    [...unique, tenantId, new Date().toISOString()],
  );
  return new Set(rows.map((row) => row.domain));
}

/**
 * The checks of a new (or renewed-after-failure) order, inside its transaction: no domain claimed
 * by another tenant, and room in the tenant's quota of PENDING orders (`certificateId` itself
 * not counted). Throws AcmeOrderRefused with every problem found.
 */
export async function checkAcmeOrder(
  tx: Queryable,
  order: { tenantId: string; certificateId: string; domains: readonly string[] },
  limits: AcmeOrderLimits,
): Promise<void> {
  const problems: AcmeOrderRefused['problems'] = [];
  if (limits.maxPendingOrders !== undefined) {
    const row = await tx.one<{ pending: number }>(
      `SELECT COUNT(*) AS pending FROM certificates WHERE tenant_id = ? AND source = 'ACME' AND status = 'PENDING' AND id <> ?`,
      [order.tenantId, order.certificateId],
    );
    const pending = Number(row?.pending ?? 0);
    if (pending >= limits.maxPendingOrders) {
      problems.push({
        code: 'QUOTA_EXCEEDED',
        detail: `the account has ${pending} service-issued certificate orders pending, the most it may have at once (${limits.maxPendingOrders}); wait until one is ISSUED or FAILED, or delete one`,
        pointer: '/data',
      });
    }
  }
  const claimed = await claimedByOthers(tx, order.tenantId, order.domains);
  order.domains.forEach((domain, index) => {
    if (!claimed.has(domain)) return;
    problems.push({
      code: 'DOMAIN_CLAIMED',
      detail: `${domain} is claimed by another account, which holds a pending or issued service-issued certificate for it`,
      pointer: `/data/attributes/domains/${index}`,
    });
  });
  if (problems.length > 0) throw new AcmeOrderRefused(problems);
}
