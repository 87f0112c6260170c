import crypto from 'node:crypto';
import type { Db, Queryable } from './db.ts';
import { bumpRevision } from './revision.ts';
import { releaseInterimAttributes } from './traffic-configs.ts';
import { DEFAULT_QUOTAS, countRows, enforceQuota, type TenantQuotas } from './quotas.ts';

export type CertificateSource = 'CUSTOMER' | 'ACME';
export type CertificateStatus = 'PENDING' | 'ISSUED' | 'FAILED';

/** What X.509 parsing tells about a leaf certificate. */
export interface CertificateFacts {
  subject: string;
  subjectAltNames: string[];
  issuer: string;
  notBefore: string;
  notAfter: string;
  fingerprint: string;
}

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
}

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
        for (const domain of new Set(domains)) {
          await tx.run('INSERT INTO acme_certificate_domains (certificate_id, tenant_id, domain) VALUES (?, ?, ?)', [record.id, tenantId, domain]);
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
         AND (status = 'PENDING'
              OR (status = 'ISSUED' AND (renewal_requested_at IS NOT NULL OR (renew_after IS NOT NULL AND renew_after <= ?))))
       ORDER BY COALESCE(next_attempt_at, created_at), id LIMIT ?`,
      [now, now, now, limit],
    );
    return rows.map(fromRow);
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
    return this.db.transaction(async (tx) => {
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
    }).catch((error: unknown) => {
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
  async markAttemptFailed(id: string, failure: { detail: string; renewalError: string | null; attempts: number; nextAttemptAt: string }): Promise<void> {
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
          `UPDATE certificates SET status = 'PENDING', status_detail = NULL, attempts = 0, next_attempt_at = NULL,
             revision = ?, updated_at = ? WHERE id = ? AND tenant_id = ?`,
          [revision, now, id, tenantId],
        );
      } else if (row.status === 'ISSUED') {
        await tx.run('UPDATE certificates SET renewal_requested_at = ?, next_attempt_at = NULL, updated_at = ? WHERE id = ? AND tenant_id = ?', [
          now,
          now,
          id,
          tenantId,
        ]);
      }
      const updated = await tx.one<Row>('SELECT * FROM certificates WHERE id = ? AND tenant_id = ?', [id, tenantId]);
      return updated && fromRow(updated);
    });
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
async function checkAcmeOrder(
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

class CertificateGone extends Error {
  constructor(id: string) {
    super(`certificate ${id} no longer exists`);
  }
}

export interface CaCertificateEntry {
  certificate: string;
  crlUrl?: string;
  subject: string;
  fingerprint: string;
  notAfter: string;
  /** Entries with a crlUrl: how the revocation list fetches go (written by src/certs/crl.ts). */
  crl?: CrlStatus;
}

/** The state of one CA entry's revocation list, as shown in the CA certificate resource. */
export interface CrlStatus {
  /** Last successful fetch (the CRL in use was fetched then); null while none succeeded. */
  fetchedAt: string | null;
  /** Why the last fetch failed; null when it succeeded. The last good CRL stays in use. */
  error: string | null;
  /** The last fetch attempt, successful or not. */
  attemptedAt: string;
  /** The CRL's own thisUpdate / nextUpdate, when one is in use. */
  thisUpdate?: string;
  nextUpdate?: string;
  /** How many certificates the CRL in use revokes. */
  revokedCount?: number;
}

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
    return (await this.db.all<CaRow>('SELECT * FROM ca_certificates WHERE tenant_id = ? ORDER BY created_at, id', [tenantId])).map(caFromRow);
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
async function writeCrlStatus(tx: Queryable, id: string, entryIndex: number, status: CrlStatus): Promise<void> {
  const row = await tx.one<CaRow>('SELECT * FROM ca_certificates WHERE id = ?', [id]);
  if (!row) return;
  const entries = JSON.parse(row.entries) as CaCertificateEntry[];
  const entry = entries[entryIndex];
  if (!entry) return;
  entry.crl = status;
  await tx.run('UPDATE ca_certificates SET entries = ? WHERE id = ?', [JSON.stringify(entries), id]);
}

/**
 * Not deleted, either because the tenant has no such resource (`notFound`, whatever another tenant
 * holds) or because configurations refer to it: `referencedBy` lists the tenant's own; a reference
 * from another tenant's configuration (which the API never lets one make) also keeps it, unnamed.
 */
export type DeleteOutcome = { deleted: true } | { deleted: false; notFound: true } | { deleted: false; notFound: false; referencedBy: string[] };

async function deleteUnreferenced(db: Db, table: 'certificates' | 'ca_certificates', tenantId: string, id: string): Promise<DeleteOutcome> {
  const kind = table === 'certificates' ? 'certificate' : 'caCertificate';
  return db.transaction(async (tx) => {
    // Ownership first: another tenant's id is answered exactly as an unknown one.
    const owned = await tx.one(`SELECT id FROM ${table} WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    if (!owned) return { deleted: false, notFound: true };
    const references = await tx.all<{ config_id: string; tenant_id: string }>(
      `SELECT DISTINCT r.config_id, c.tenant_id FROM config_references r JOIN traffic_configs c ON c.id = r.config_id
       WHERE r.ref_kind = ? AND r.ref_id = ? ORDER BY r.config_id`,
      [kind, id],
    );
    if (references.length > 0) {
      return { deleted: false, notFound: false, referencedBy: references.filter((row) => row.tenant_id === tenantId).map((row) => row.config_id) };
    }
    const deleted = await tx.run(`DELETE FROM ${table} WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    if (deleted === 0) return { deleted: false, notFound: true };
    await bumpRevision(tx);
    return { deleted: true };
  });
}

// --- ACME accounts, pending challenges, CRL cache (src/certs/) ---------------------------------

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
    const row = await this.db.one<AcmeAccountRow>('SELECT * FROM acme_accounts WHERE directory_url = ? AND tenant_id = ?', [directoryUrl, tenantId]);
    return row && accountFromRow(row);
  }

  /** Every tenant's account at the directory. */
  async list(directoryUrl: string): Promise<AcmeAccountRecord[]> {
    const rows = await this.db.all<AcmeAccountRow>('SELECT * FROM acme_accounts WHERE directory_url = ? ORDER BY created_at, tenant_id', [directoryUrl]);
    return rows.map(accountFromRow);
  }

  /** Stores a newly registered account unless another node stored one first; answers the one kept. */
  async add(account: { directoryUrl: string; tenantId: string; email: string | null; accountUrl: string; sealedPrivateKey: string }): Promise<AcmeAccountRecord> {
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
    await this.db.run('DELETE FROM acme_accounts WHERE directory_url = ? AND tenant_id = ? AND account_url = ?', [directoryUrl, tenantId, accountUrl]);
  }
}

export type AcmeChallengeType = 'http-01' | 'tls-alpn-01';

export interface AcmeChallengeRecord {
  type: AcmeChallengeType;
  token: string;
  /** The tenant that ordered: only its proxies answer the challenge. */
  tenantId: string;
  /** The identifier being validated (lower case, no trailing dot). */
  domain: string;
  keyAuthorization: string;
  certificateId: string;
  expiresAt: string;
}

interface ChallengeRow {
  type: string;
  token: string;
  tenant_id: string;
  domain: string;
  key_authorization: string;
  certificate_id: string;
  expires_at: string;
}

const challengeFromRow = (row: ChallengeRow): AcmeChallengeRecord => ({
  type: row.type as AcmeChallengeType,
  token: row.token,
  tenantId: row.tenant_id,
  domain: row.domain,
  keyAuthorization: row.key_authorization,
  certificateId: row.certificate_id,
  expiresAt: row.expires_at,
});

/**
 * Challenges of running orders. Not part of the edge's snapshot (the revision does not move): the
 * edge asks for them when a CA's validation request arrives.
 */
export class AcmeChallengeRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async put(challenge: AcmeChallengeRecord): Promise<void> {
    await this.db.run(
      `INSERT INTO acme_challenges (type, token, tenant_id, domain, key_authorization, certificate_id, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (type, token) DO UPDATE SET tenant_id = excluded.tenant_id, domain = excluded.domain, key_authorization = excluded.key_authorization,
         certificate_id = excluded.certificate_id, expires_at = excluded.expires_at`,
      [
        challenge.type,
        challenge.token,
        challenge.tenantId,
        challenge.domain,
        challenge.keyAuthorization,
        challenge.certificateId,
        challenge.expiresAt,
        new Date().toISOString(),
      ],
    );
  }

  /** Every challenge not yet expired at `now` (a handful at any time). */
  async live(now: string, limit = 10_000): Promise<AcmeChallengeRecord[]> {
    const rows = await this.db.all<ChallengeRow>('SELECT * FROM acme_challenges WHERE expires_at > ? ORDER BY created_at DESC LIMIT ?', [now, limit]);
    return rows.map(challengeFromRow);
  }

  async deleteForCertificate(certificateId: string): Promise<void> {
    await this.db.run('DELETE FROM acme_challenges WHERE certificate_id = ?', [certificateId]);
  }

  async purgeExpired(now: string): Promise<void> {
    await this.db.run('DELETE FROM acme_challenges WHERE expires_at <= ?', [now]);
  }
}

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
      const current = await tx.one<CrlRow>('SELECT * FROM crl_cache WHERE ca_certificate_id = ? AND entry_index = ?', [key.caCertificateId, key.entryIndex]);
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
  async recordFailure(key: { caCertificateId: string; entryIndex: number; crlUrl: string }, error: string, at: string, status: CrlStatus): Promise<void> {
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
