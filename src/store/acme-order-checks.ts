/**
 * What a service-issued certificate order must pass before it is stored (a new order, or a FAILED
 * one ordered again): no domain claimed by another tenant, room in the tenant's quota of pending
 * orders. Run inside the transaction that writes the order.
 *
 * A claim ends: a PENDING order holds its names for TPS_ACME_CLAIM_SECONDS (a day), and past that
 * only while an attempt on it runs; then it turns FAILED. Without an end, an order for a name the
 * tenant does not control (its challenges never pass, each attempt retried) would keep the name
 * from its owner for as long as the retries last.
 */
import type { Queryable } from './db.ts';
import { bumpRevision } from './revision.ts';

/** Bounds on a tenant's service-issued certificates (operator settings). */
export interface AcmeOrderLimits {
  /** PENDING orders a tenant may have at once; absent = no limit. */
  maxPendingOrders?: number;
  /** How long a PENDING order claims its names (TPS_ACME_CLAIM_SECONDS); absent = DEFAULT_CLAIM_SECONDS. */
  claimSeconds?: number;
}

/** A day: Let's Encrypt's authorizations live 7 days, but an order that has not passed in a day is stuck. */
export const DEFAULT_CLAIM_SECONDS = 24 * 3600;

/** Until when an order made at `now` claims its names. */
export function claimUntil(now: Date, limits: AcmeOrderLimits): string {
  return new Date(now.getTime() + (limits.claimSeconds ?? DEFAULT_CLAIM_SECONDS) * 1000).toISOString();
}

/** What a tenant reads on an order whose claim ended before it was issued. */
export const CLAIM_ENDED_DETAIL =
  'not issued before its claim on the names ended (a pending order holds them for a limited time): ' +
  'the order was given up and the names are free again; renew the certificate to order again';

export type AcmeOrderProblemCode = 'DOMAIN_CLAIMED' | 'QUOTA_EXCEEDED';

/** An order the store refused, with one problem per offending domain (or the quota). Nothing was written. */
export class AcmeOrderRefused extends Error {
  readonly problems: { code: AcmeOrderProblemCode; detail: string; pointer: string }[];
  constructor(problems: { code: AcmeOrderProblemCode; detail: string; pointer: string }[]) {
    super(problems.map((problem) => problem.detail).join('; '));
    this.problems = problems;
  }
}

/**
 * A PENDING order claims its names until its claim_until, and past it only while an attempt holds
 * its lease (the CA may be validating right now); an ISSUED certificate past its notAfter claims
 * nothing: the name may have changed hands. Parameters: now, three times.
 */
const LIVE_CLAIM = `c.source = 'ACME' AND (
  (c.status = 'PENDING' AND (c.claim_until IS NULL OR c.claim_until > ? OR (c.lease_until IS NOT NULL AND c.lease_until > ?)))
  OR (c.status = 'ISSUED' AND (c.not_after IS NULL OR c.not_after > ?)))`;

/** PENDING orders whose claim ended and on which no attempt runs (parameters: now, now). */
const STALE_ORDER = `source = 'ACME' AND status = 'PENDING' AND claim_until IS NOT NULL AND claim_until <= ?
  AND (lease_until IS NULL OR lease_until <= ?)`;

/**
 * Orders whose claim ended turn FAILED (CLAIM_ENDED_DETAIL), so that what the tenant reads matches
 * what the names are: free. The store revision moves only when one did (the edge shows a proxy
 * waiting for such a certificate as ERROR). Returns the ids.
 */
export async function expireStaleOrders(tx: Queryable, now: Date): Promise<string[]> {
  const at = now.toISOString();
  const stale = await tx.all<{ id: string }>(`SELECT id FROM certificates WHERE ${STALE_ORDER}`, [at, at]);
  if (stale.length === 0) return [];
  const revision = await bumpRevision(tx);
  for (const { id } of stale) {
    await tx.run(
      `UPDATE certificates SET status = 'FAILED', status_detail = ?, next_attempt_at = NULL, renewal_requested_at = NULL,
         revision = ?, updated_at = ? WHERE id = ? AND ${STALE_ORDER}`,
      [CLAIM_ENDED_DETAIL, revision, at, id, at, at],
    );
  }
  return stale.map((row) => row.id);
}

/**
 * Which of `domains` tenants other than `tenantId` claim: they hold a PENDING or an unexpired
 * ISSUED service-issued certificate naming it. Customer certificates claim nothing.
 */
async function claimedByOthers(tx: Queryable, tenantId: string, domains: readonly string[]): Promise<Set<string>> {
  const unique = [...new Set(domains)];
  const now = new Date().toISOString();
  if (unique.length === 0) return new Set();
  const rows = await tx.all<{ domain: string }>(
    `SELECT DISTINCT d.domain FROM acme_certificate_domains d JOIN certificates c ON c.id = d.certificate_id
     WHERE d.domain IN (${unique.map(() => '?').join(',')}) AND d.tenant_id <> ? AND ${LIVE_CLAIM}`,
    [...unique, tenantId, now, now, now],
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
  // Orders whose claim ended leave PENDING first: they count neither against a quota nor as claims.
  await expireStaleOrders(tx, new Date());
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
