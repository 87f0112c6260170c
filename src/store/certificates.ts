/**
 * Front-end TLS certificates: customer uploads and service-issued (ACME) ones, with the state of
 * the ACME work on the latter (src/certs/acme.ts drives it). Private keys arrive sealed.
 */
import crypto from 'node:crypto';
import type { CertificateFacts, CertificateSource, CertificateStatus } from '@tps/model';
import type { Db, Queryable } from './db.ts';
import { bumpRevision } from './revision.ts';
import { releaseInterimAttributes } from './traffic-configs.ts';
import { DEFAULT_QUOTAS, countRows, enforceQuota, type TenantQuotas } from './quotas.ts';
import { checkAcmeOrder, claimUntil, expireStaleOrders, type AcmeOrderLimits } from './acme-order-checks.ts';
import { deleteUnreferenced, type DeleteOutcome } from './referenced-resources.ts';

export interface CertificateRecord extends Partial<CertificateFacts> {
  id: string;
  tenantId: string;
  source: CertificateSource;
  status: CertificateStatus;
  statusDetail: string | null;
  domains: string[];
  certificatePem: string | null;
  chainPem: string | null;
  /** Sealed with the master key; never leaves the service. */
  sealedPrivateKey: string | null;
  revision: number;
  createdAt: string;
  updatedAt: string;
  /** Service-issued certificates only: renewal and retry state (see src/certs/acme.ts). */
  acme?: AcmeWorkState;
}

/** Where the ACME work on a service-issued certificate stands. */
export interface AcmeWorkState {
  /** When the certificate is renewed by itself (30 days after issuance). */
  renewAfter: string | null;
  /** A failed attempt is retried at this time (backoff), not before. */
  nextAttemptAt: string | null;
  /** Failed attempts since the last success. */
  attempts: number;
  /** Why the last renewal failed (the certificate in use stays served meanwhile). */
  lastRenewalError: string | null;
  /** An operator asked for a renewal now. */
  renewalRequestedAt: string | null;
  /** PENDING: until when the order claims its names from other tenants (acme-order-checks.ts). */
  claimUntil: string | null;
}

const EMPTY_WORK: AcmeWorkState = {
  renewAfter: null,
  nextAttemptAt: null,
  attempts: 0,
  lastRenewalError: null,
  renewalRequestedAt: null,
  claimUntil: null,
};

interface Row {
  id: string;
  tenant_id: string;
  source: string;
  status: string;
  status_detail: string | null;
  domains: string;
  certificate_pem: string | null;
  chain_pem: string | null;
  private_key: string | null;
  subject: string | null;
  sans: string | null;
  issuer: string | null;
  not_before: string | null;
  not_after: string | null;
  fingerprint: string | null;
  revision: number;
  created_at: string;
  updated_at: string;
  renew_after?: string | null;
  next_attempt_at?: string | null;
  attempts?: number | null;
  last_renewal_error?: string | null;
  renewal_requested_at?: string | null;
  claim_until?: string | null;
}

const fromRow = (row: Row): CertificateRecord => ({
  id: row.id,
  tenantId: row.tenant_id,
  source: row.source as CertificateSource,
  status: row.status as CertificateStatus,
  statusDetail: row.status_detail,
  domains: JSON.parse(row.domains) as string[],
  certificatePem: row.certificate_pem,
  chainPem: row.chain_pem,
  sealedPrivateKey: row.private_key,
  ...(row.subject !== null && { subject: row.subject }),
  ...(row.sans !== null && { subjectAltNames: JSON.parse(row.sans) as string[] }),
  ...(row.issuer !== null && { issuer: row.issuer }),
  ...(row.not_before !== null && { notBefore: row.not_before }),
  ...(row.not_after !== null && { notAfter: row.not_after }),
  ...(row.fingerprint !== null && { fingerprint: row.fingerprint }),
  revision: Number(row.revision),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
  ...(row.source === 'ACME' && {
    acme: {
      renewAfter: row.renew_after ?? null,
      nextAttemptAt: row.next_attempt_at ?? null,
      attempts: Number(row.attempts ?? 0),
      lastRenewalError: row.last_renewal_error ?? null,
      renewalRequestedAt: row.renewal_requested_at ?? null,
      claimUntil: row.claim_until ?? null,
    },
  }),
});

export class CertificateRepository {
  readonly db: Db;
  readonly #quotas: TenantQuotas;
  constructor(db: Db, quotas: TenantQuotas = DEFAULT_QUOTAS) {
    this.db = db;
    this.#quotas = quotas;
  }

  /** A fresh certificate id: the private key is sealed for its row before the row exists. */
  static newId(): string {
    return crypto.randomUUID();
  }

  /** A customer-uploaded certificate; `material.id` from newId(), the key sealed for that id and tenant. */
  async createCustomer(
    tenantId: string,
    material: { id: string; certificatePem: string; chainPem: string; sealedPrivateKey: string },
    facts: CertificateFacts,
  ): Promise<CertificateRecord> {
    return this.#insert(material.id, {
      tenantId,
      source: 'CUSTOMER',
      status: 'ISSUED',
      statusDetail: null,
      domains: facts.subjectAltNames,
      certificatePem: material.certificatePem,
      chainPem: material.chainPem,
      sealedPrivateKey: material.sealedPrivateKey,
      ...facts,
    });
  }

  /**
   * A service-issued certificate: PENDING until the ACME order completes. Refused
   * (`AcmeOrderRefused`, nothing written) when another tenant claims one of the domains, or when
   * the tenant already has `limits.maxPendingOrders` PENDING orders (no limit when absent).
   */
  async createAcme(tenantId: string, domains: string[], limits: AcmeOrderLimits = {}): Promise<CertificateRecord> {
    return this.#insert(
      CertificateRepository.newId(),
      {
        tenantId,
        source: 'ACME',
        status: 'PENDING',
        statusDetail: null,
        domains,
        certificatePem: null,
        chainPem: null,
        sealedPrivateKey: null,
      },
      async (tx, record) => {
        await checkAcmeOrder(tx, { tenantId, certificateId: record.id, domains }, limits);
        record.acme = { ...EMPTY_WORK, claimUntil: claimUntil(new Date(record.createdAt), limits) };
        await tx.run('UPDATE certificates SET claim_until = ? WHERE id = ?', [record.acme.claimUntil, record.id]);
        for (const domain of new Set(domains)) {
          await tx.run('INSERT INTO acme_certificate_domains (certificate_id, tenant_id, domain) VALUES (?, ?, ?)', [
            record.id,
            tenantId,
            domain,
          ]);
        }
      },
    );
  }

  async #insert(
    id: string,
    fields: Omit<CertificateRecord, 'id' | 'revision' | 'createdAt' | 'updatedAt'>,
    alongside?: (tx: Queryable, record: CertificateRecord) => Promise<void>,
  ): Promise<CertificateRecord> {
    return this.db.transaction(async (tx) => {
      await enforceQuota(
        tx,
        fields.tenantId,
        { limit: this.#quotas.certificates, resource: 'certificates', setting: 'TPS_QUOTA_CERTIFICATES' },
        countRows('certificates', fields.tenantId),
      );
      const now = new Date().toISOString();
      // The revision's row lock (after the tenant's, always in that order) puts concurrent writers
      // one after the other (PostgreSQL too), so the checks of `alongside` see every order
      // committed before this one.
      const record: CertificateRecord = { ...fields, id, revision: await bumpRevision(tx), createdAt: now, updatedAt: now };
      await tx.run(
        `INSERT INTO certificates (id, tenant_id, source, status, status_detail, domains, certificate_pem, chain_pem, private_key,
           subject, sans, issuer, not_before, not_after, fingerprint, revision, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          record.id,
          record.tenantId,
          record.source,
          record.status,
          record.statusDetail,
          JSON.stringify(record.domains),
          record.certificatePem,
          record.chainPem,
          record.sealedPrivateKey,
          record.subject ?? null,
          record.subjectAltNames ? JSON.stringify(record.subjectAltNames) : null,
          record.issuer ?? null,
          record.notBefore ?? null,
          record.notAfter ?? null,
          record.fingerprint ?? null,
          record.revision,
          now,
          now,
        ],
      );
      await alongside?.(tx, record);
      return record;
    });
  }

  async get(tenantId: string, id: string): Promise<CertificateRecord | undefined> {
    const row = await this.db.one<Row>('SELECT * FROM certificates WHERE id = ? AND tenant_id = ?', [id, tenantId]);
    return row && fromRow(row);
  }

  /** For the edge, which serves every tenant: no tenant filter. */
  async getAny(id: string): Promise<CertificateRecord | undefined> {
    const row = await this.db.one<Row>('SELECT * FROM certificates WHERE id = ?', [id]);
    return row && fromRow(row);
  }

  async list(tenantId: string): Promise<CertificateRecord[]> {
    return (await this.db.all<Row>('SELECT * FROM certificates WHERE tenant_id = ? ORDER BY created_at, id', [tenantId])).map(fromRow);
  }

  /** Deletes the certificate unless a proxy refers to it; then nothing changes and the proxies are named. */
  async delete(tenantId: string, id: string): Promise<DeleteOutcome> {
    return deleteUnreferenced(this.db, 'certificates', tenantId, id);
  }

  // --- ACME work (src/certs/acme.ts) -----------------------------------------------------------

  /**
   * Service-issued certificates with work due at `now`: PENDING ones (first issuance) and ISSUED
   * ones whose renewal time came or that an operator asked to renew; never before their
   * next_attempt_at (backoff), never while another node holds their lease.
   */
  async dueForAcme(now: string, limit: number): Promise<CertificateRecord[]> {
    const rows = await this.db.all<Row>(
      `SELECT * FROM certificates WHERE source = 'ACME'
         AND (lease_until IS NULL OR lease_until < ?)
         AND (next_attempt_at IS NULL OR next_attempt_at <= ?)
         AND ((status = 'PENDING' AND (claim_until IS NULL OR claim_until > ?))
              OR (status = 'ISSUED' AND (renewal_requested_at IS NOT NULL OR (renew_after IS NOT NULL AND renew_after <= ?))))
       ORDER BY COALESCE(next_attempt_at, created_at), id LIMIT ?`,
      [now, now, now, now, limit],
    );
    return rows.map(fromRow);
  }

  /**
   * PENDING orders whose claim ended, with no attempt running on them, turn FAILED (their names
   * are free again). The ACME service asks at every scan; new orders ask in their transaction.
   */
  async expireStaleOrders(now = new Date()): Promise<string[]> {
    return this.db.transaction((tx) => expireStaleOrders(tx, now));
  }

  /**
   * Takes (or, for its holder, extends) the certificate's lease for `owner` until `until`; false
   * when another holder's lease still runs.
   */
  async claimAcme(id: string, owner: string, until: string, now: string): Promise<boolean> {
    const changed = await this.db.run(
      `UPDATE certificates SET lease_owner = ?, lease_until = ?
       WHERE id = ? AND source = 'ACME' AND (lease_until IS NULL OR lease_until < ? OR lease_owner = ?)`,
      [owner, until, id, now, owner],
    );
    return changed > 0;
  }

  async releaseAcme(id: string, owner: string): Promise<void> {
    await this.db.run('UPDATE certificates SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?', [id, owner]);
  }

  /**
   * The CA issued (or renewed) the certificate: the new material replaces the old in the same
   * record, so every proxy that refers to it serves it after the edge reloads (revision bump).
   */
  async markIssued(
    id: string,
    material: { certificatePem: string; chainPem: string; sealedPrivateKey: string },
    facts: CertificateFacts,
    renewAfter: string,
  ): Promise<CertificateRecord | undefined> {
    return this.db
      .transaction(async (tx) => {
        const revision = await bumpRevision(tx);
        const changed = await tx.run(
          `UPDATE certificates SET status = 'ISSUED', status_detail = NULL, certificate_pem = ?, chain_pem = ?, private_key = ?,
           subject = ?, sans = ?, issuer = ?, not_before = ?, not_after = ?, fingerprint = ?,
           renew_after = ?, next_attempt_at = NULL, attempts = 0, last_renewal_error = NULL, renewal_requested_at = NULL,
           lease_owner = NULL, lease_until = NULL, revision = ?, updated_at = ?
         WHERE id = ? AND source = 'ACME'`,
          [
            material.certificatePem,
            material.chainPem,
            material.sealedPrivateKey,
            facts.subject,
            JSON.stringify(facts.subjectAltNames),
            facts.issuer,
            facts.notBefore,
            facts.notAfter,
            facts.fingerprint,
            renewAfter,
            revision,
            new Date().toISOString(),
            id,
          ],
        );
        if (changed === 0) throw new CertificateGone(id);
        // Proxies that were PUT with this certificate while it was pending served their previous
        // configuration meanwhile; from this revision on they serve the one they were given.
        await releaseInterimAttributes(tx, id);
        const row = await tx.one<Row>('SELECT * FROM certificates WHERE id = ?', [id]);
        return row && fromRow(row);
      })
      .catch((error: unknown) => {
        if (error instanceof CertificateGone) return undefined;
        throw error;
      });
  }

  /** The first issuance failed for good: FAILED with the CA's reason. */
  async markFailed(id: string, detail: string): Promise<void> {
    await this.db.transaction(async (tx) => {
      const revision = await bumpRevision(tx);
      await tx.run(
        `UPDATE certificates SET status = 'FAILED', status_detail = ?, next_attempt_at = NULL, renewal_requested_at = NULL,
           lease_owner = NULL, lease_until = NULL, revision = ?, updated_at = ?
         WHERE id = ? AND source = 'ACME' AND status = 'PENDING'`,
        [detail, revision, new Date().toISOString(), id],
      );
    });
  }

  /**
   * An attempt failed and will be retried at `nextAttemptAt`. The served material does not change
   * (a renewal keeps the certificate in use), so the revision does not move.
   */
  async markAttemptFailed(
    id: string,
    failure: { detail: string; renewalError: string | null; attempts: number; nextAttemptAt: string },
  ): Promise<void> {
    await this.db.run(
      `UPDATE certificates SET status_detail = ?, last_renewal_error = COALESCE(?, last_renewal_error), attempts = ?, next_attempt_at = ?,
         renewal_requested_at = NULL, lease_owner = NULL, lease_until = NULL, updated_at = ?
       WHERE id = ? AND source = 'ACME'`,
      [failure.detail, failure.renewalError, failure.attempts, failure.nextAttemptAt, new Date().toISOString(), id],
    );
  }

  /**
   * An operator asks for a renewal now: an ISSUED certificate is renewed at once (any backoff is
   * skipped); a FAILED one goes back to PENDING and is ordered again, unless that order is refused
   * like a new one (`AcmeOrderRefused`: another tenant claims a domain meanwhile, or the quota of
   * pending orders is full). Undefined: no such ACME certificate of the tenant.
   */
  async requestRenewal(tenantId: string, id: string, limits: AcmeOrderLimits = {}): Promise<CertificateRecord | undefined> {
    return this.db.transaction(async (tx) => {
      const row = await tx.one<Row>("SELECT * FROM certificates WHERE id = ? AND tenant_id = ? AND source = 'ACME'", [id, tenantId]);
      if (!row) return undefined;
      const now = new Date().toISOString();
      if (row.status === 'FAILED') {
        // Back to PENDING is a new order: the same claims and quota as a new request.
        const revision = await bumpRevision(tx);
        await checkAcmeOrder(tx, { tenantId, certificateId: id, domains: JSON.parse(row.domains) as string[] }, limits);
        await tx.run(
          `UPDATE certificates SET status = 'PENDING', status_detail = NULL, attempts = 0, next_attempt_at = NULL, claim_until = ?,
             revision = ?, updated_at = ? WHERE id = ? AND tenant_id = ?`,
          [claimUntil(new Date(now), limits), revision, now, id, tenantId],
        );
      } else if (row.status === 'ISSUED') {
        await tx.run(
          'UPDATE certificates SET renewal_requested_at = ?, next_attempt_at = NULL, updated_at = ? WHERE id = ? AND tenant_id = ?',
          [now, now, id, tenantId],
        );
      }
      const updated = await tx.one<Row>('SELECT * FROM certificates WHERE id = ? AND tenant_id = ?', [id, tenantId]);
      return updated && fromRow(updated);
    });
  }
}

class CertificateGone extends Error {
  constructor(id: string) {
    super(`certificate ${id} no longer exists`);
  }
}
