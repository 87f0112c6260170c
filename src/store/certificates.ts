import crypto from 'node:crypto';
import type { Db } from './db.ts';
import { bumpRevision } from './revision.ts';

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
});

export class CertificateRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async createCustomer(
    tenantId: string,
    material: { certificatePem: string; chainPem: string; sealedPrivateKey: string },
    facts: CertificateFacts,
  ): Promise<CertificateRecord> {
    return this.#insert({
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

  /** A service-issued certificate: PENDING until the ACME order completes. */
  async createAcme(tenantId: string, domains: string[]): Promise<CertificateRecord> {
    return this.#insert({
      tenantId,
      source: 'ACME',
      status: 'PENDING',
      statusDetail: null,
      domains,
      certificatePem: null,
      chainPem: null,
      sealedPrivateKey: null,
    });
  }

  async #insert(fields: Omit<CertificateRecord, 'id' | 'revision' | 'createdAt' | 'updatedAt'>): Promise<CertificateRecord> {
    return this.db.transaction(async (tx) => {
      const now = new Date().toISOString();
      const record: CertificateRecord = { ...fields, id: crypto.randomUUID(), revision: await bumpRevision(tx), createdAt: now, updatedAt: now };
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
}

export interface CaCertificateEntry {
  certificate: string;
  crlUrl?: string;
  subject: string;
  fingerprint: string;
  notAfter: string;
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
  constructor(db: Db) {
    this.db = db;
  }

  async create(tenantId: string, entries: CaCertificateEntry[]): Promise<CaCertificateRecord> {
    return this.db.transaction(async (tx) => {
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
}

export type DeleteOutcome = { deleted: true } | { deleted: false; referencedBy: string[] };

async function deleteUnreferenced(db: Db, table: 'certificates' | 'ca_certificates', tenantId: string, id: string): Promise<DeleteOutcome> {
  return db.transaction(async (tx) => {
    const referencedBy = (
      await tx.all<{ config_id: string }>('SELECT DISTINCT config_id FROM config_references WHERE ref_id = ? ORDER BY config_id', [id])
    ).map((row) => row.config_id);
    if (referencedBy.length > 0) return { deleted: false, referencedBy };
    const deleted = await tx.run(`DELETE FROM ${table} WHERE id = ? AND tenant_id = ?`, [id, tenantId]);
    if (deleted > 0) await bumpRevision(tx);
    return deleted > 0 ? { deleted: true } : { deleted: false, referencedBy: [] };
  });
}
