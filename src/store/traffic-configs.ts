import crypto from 'node:crypto';
import type { Db, Queryable } from './db.ts';
import { UniqueViolation } from './db.ts';
import { ConflictError, type ConflictCode } from './errors.ts';
import { bumpRevision } from './revision.ts';
import { DEFAULT_QUOTAS, countRows, enforceQuota, type TenantQuotas } from './quotas.ts';
import { HTTP_PROXY, type ProxyType, type TrafficConfigAttributes, type HttpProxyAttributes, type L4ProxyAttributes } from '@tps/model';
import { canonicalIp } from '../net/ip.ts';

/** Attributes as stored: what the client sent, with defaults applied, without read-only fields. */
export type StoredAttributes = Omit<TrafficConfigAttributes, 'status' | 'statusDetail' | 'createdAt' | 'updatedAt'>;

export interface TrafficConfigRecord {
  id: string;
  tenantId: string;
  type: ProxyType;
  attributes: StoredAttributes;
  /** The store revision of the last change: edge nodes report which revision they serve. */
  revision: number;
  /**
   * Per front-end binding (`bindingKey`), the store revision since which this configuration has
   * claimed it: the edge gives a contested binding to the longest holder (edge/runtime/binding-arbiter.ts).
   */
  bindingSince: Record<string, number>;
  createdAt: string;
  updatedAt: string;
  /**
   * What the edge serves until the certificate `attributes` names is issued: the configuration as
   * it was served before the PUT or PATCH that named a certificate still PENDING (the spec's
   * procedure PUTs port 443 as soon as it has the id; port 80 must keep answering the challenge).
   * Its ports stay assigned to this configuration meanwhile. Absent otherwise.
   */
  interimAttributes?: StoredAttributes;
}

export interface HttpProxyRecord extends TrafficConfigRecord {
  type: typeof HTTP_PROXY;
  attributes: HttpProxyAttributes;
}

export interface L4ProxyRecord extends TrafficConfigRecord {
  type: 'l4Proxy';
  attributes: L4ProxyAttributes;
}

interface Row {
  id: string;
  tenant_id: string;
  type: string;
  attributes: string;
  revision: number;
  binding_since: string | null;
  created_at: string;
  updated_at: string;
  interim_attributes?: string | null;
}

const fromRow = (row: Row): TrafficConfigRecord => {
  const type = row.type as ProxyType;
  const attributes = JSON.parse(row.attributes) as StoredAttributes;
  const interimAttributes = row.interim_attributes == null ? undefined : (JSON.parse(row.interim_attributes) as StoredAttributes);
  const revision = Number(row.revision);
  const previousSince = row.binding_since === null ? {} : (JSON.parse(row.binding_since) as Record<string, number>);
  return {
    id: row.id,
    tenantId: row.tenant_id,
    type,
    attributes,
    revision,
    bindingSince: withBindingSince({ type, attributes, interimAttributes }, previousSince, revision),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    ...(interimAttributes !== undefined && { interimAttributes }),
  };
};

/** "ip|port|protocol": one front-end binding. */
export const bindingKey = (binding: { ip: string; port: number; protocol: string }) => `${binding.ip}|${binding.port}|${binding.protocol}`;

/**
 * The (ip, port, protocol) triples a configuration holds: those of its attributes and, while a
 * certificate it names is pending, those of the interim attributes the edge serves meanwhile.
 */
export function heldBindings(
  record: Pick<TrafficConfigRecord, 'type' | 'attributes' | 'interimAttributes'>,
): { ip: string; port: number; protocol: string }[] {
  const served = record.interimAttributes ? [record.attributes, record.interimAttributes] : [record.attributes];
  const bindings = new Map(served.flatMap((attributes) => frontendBindings(record.type, attributes)).map((b) => [bindingKey(b), b]));
  return [...bindings.values()];
}

/**
 * The since-revision of each of the configuration's bindings: kept from `previous` where the
 * binding was already claimed, `revision` for one claimed from this revision on.
 */
function withBindingSince(
  record: Pick<TrafficConfigRecord, 'type' | 'attributes' | 'interimAttributes'>,
  previous: Record<string, number>,
  revision: number,
): Record<string, number> {
  const since: Record<string, number> = {};
  for (const binding of heldBindings(record)) {
    const key = bindingKey(binding);
    since[key] = previous[key] ?? revision;
  }
  return since;
}

/** The certificate an HTTP proxy's front end serves; undefined for plain HTTP and layer 4. */
export function frontendCertificateId(type: ProxyType, attributes: StoredAttributes): string | undefined {
  return type === HTTP_PROXY ? ((attributes as HttpProxyAttributes).frontend.certificateId ?? undefined) : undefined;
}

async function certificateIssued(tx: Queryable, id: string): Promise<boolean> {
  const row = await tx.one<{ status: string }>('SELECT status FROM certificates WHERE id = ?', [id]);
  return row?.status === 'ISSUED';
}

/**
 * What the edge serves of a configuration as stored: its attributes once their certificate is
 * issued (or when they name none), else its interim attributes (absent: nothing can be served).
 */
async function servedAttributes(tx: Queryable, record: TrafficConfigRecord): Promise<StoredAttributes | undefined> {
  const certificateId = frontendCertificateId(record.type, record.attributes);
  if (certificateId === undefined || (await certificateIssued(tx, certificateId))) return record.attributes;
  return record.interimAttributes;
}

/**
 * The certificate `certificateId` was issued: configurations that named it while it was pending
 * drop their interim attributes and the ports those held. Runs inside the issuing transaction.
 */
export async function releaseInterimAttributes(tx: Queryable, certificateId: string): Promise<void> {
  const rows = await tx.all<Row>(
    `SELECT c.* FROM traffic_configs c JOIN config_references r ON r.config_id = c.id
     WHERE r.ref_id = ? AND c.interim_attributes IS NOT NULL`,
    [certificateId],
  );
  for (const row of rows) {
    const record = fromRow(row);
    if (frontendCertificateId(record.type, record.attributes) !== certificateId) continue;
    delete record.interimAttributes;
    record.bindingSince = withBindingSince(record, record.bindingSince, record.revision);
    await tx.run('UPDATE traffic_configs SET interim_attributes = NULL, binding_since = ? WHERE id = ? AND tenant_id = ?', [
      JSON.stringify(record.bindingSince),
      record.id,
      record.tenantId,
    ]);
    await rewriteIndexes(tx, record);
  }
}

/** The (ip, port, protocol) triples a configuration occupies. */
export function frontendBindings(type: ProxyType, attributes: StoredAttributes): { ip: string; port: number; protocol: string }[] {
  const { frontend } = attributes;
  const protocols = type === HTTP_PROXY ? ['TCP'] : (attributes as L4ProxyAttributes).protocols;
  const ips = [frontend.ipv4, frontend.ipv6].filter((ip): ip is string => typeof ip === 'string').map(canonicalIp);
  return ips.flatMap((ip) => protocols.map((protocol) => ({ ip, port: frontend.port, protocol })));
}

/** Certificates and CA certificates a configuration refers to (they cannot be deleted while it does). */
export function configReferences(type: ProxyType, attributes: StoredAttributes): { kind: 'certificate' | 'caCertificate'; id: string }[] {
  if (type !== HTTP_PROXY) return [];
  const http = attributes as HttpProxyAttributes;
  const refs: { kind: 'certificate' | 'caCertificate'; id: string }[] = [];
  if (http.frontend.certificateId) refs.push({ kind: 'certificate', id: http.frontend.certificateId });
  for (const id of http.frontend.clientCertificateVerification?.caCertificateIds ?? []) refs.push({ kind: 'caCertificate', id });
  const tls = http.backend.tlsSettings;
  if (tls?.clientCertificateId) refs.push({ kind: 'certificate', id: tls.clientCertificateId });
  for (const id of tls?.verifyCertificate?.caCertificateIds ?? []) refs.push({ kind: 'caCertificate', id });
  return refs.filter((ref, i) => refs.findIndex((other) => other.kind === ref.kind && other.id === ref.id) === i);
}

export const PORT_IN_USE = 'PORT_IN_USE' satisfies ConflictCode;

/**
 * Rows that hang off a configuration (bindings, references, edge status), reached only through a
 * configuration of the tenant: no statement can touch another tenant's rows, whatever id it gets.
 */
const OWNED_CONFIG = 'config_id IN (SELECT id FROM traffic_configs WHERE id = ? AND tenant_id = ?)';

export class TrafficConfigRepository {
  readonly db: Db;
  readonly #quotas: TenantQuotas;
  constructor(db: Db, quotas: TenantQuotas = DEFAULT_QUOTAS) {
    this.db = db;
    this.#quotas = quotas;
  }

  async create(tenantId: string, type: ProxyType, attributes: StoredAttributes): Promise<TrafficConfigRecord> {
    return this.db.transaction(async (tx) => {
      await enforceQuota(
        tx,
        tenantId,
        { limit: this.#quotas.proxies, resource: 'proxies', setting: 'TPS_QUOTA_PROXIES' },
        countRows('traffic_configs', tenantId),
      );
      const now = new Date().toISOString();
      const revision = await bumpRevision(tx);
      const record: TrafficConfigRecord = {
        id: crypto.randomUUID(),
        tenantId,
        type,
        attributes,
        revision,
        bindingSince: withBindingSince({ type, attributes }, {}, revision),
        createdAt: now,
        updatedAt: now,
      };
      await tx.run(
        'INSERT INTO traffic_configs (id, tenant_id, type, attributes, revision, binding_since, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
        [record.id, tenantId, type, JSON.stringify(attributes), record.revision, JSON.stringify(record.bindingSince), now, now],
      );
      await writeIndexes(tx, record);
      return record;
    });
  }

  /**
   * Replaces the attributes of a configuration of the tenant (PUT, and PATCH after merging).
   * `current` is what the caller read; the write is scoped by `tenantId` whatever it says. When the
   * attributes name a front-end certificate that is not issued yet, what the edge served so far
   * stays served (and its ports assigned) as the interim attributes, until the certificate is issued.
   */
  async replace(tenantId: string, current: TrafficConfigRecord, attributes: StoredAttributes): Promise<TrafficConfigRecord> {
    return this.db.transaction(async (tx) => {
      const revision = await bumpRevision(tx);
      // Read again inside the transaction (after the revision's lock): what is served now.
      const row = await tx.one<Row>('SELECT * FROM traffic_configs WHERE id = ? AND tenant_id = ?', [current.id, tenantId]);
      if (!row) throw new ConflictError('CONCURRENT_DELETE', 'the traffic configuration was deleted meanwhile');
      const stored = fromRow(row);
      const wanted = frontendCertificateId(stored.type, attributes);
      const interim = wanted !== undefined && !(await certificateIssued(tx, wanted)) ? await servedAttributes(tx, stored) : undefined;
      const record: TrafficConfigRecord = {
        ...stored,
        attributes,
        revision,
        updatedAt: new Date().toISOString(),
      };
      delete record.interimAttributes;
      if (interim !== undefined) record.interimAttributes = interim;
      record.bindingSince = withBindingSince(record, stored.bindingSince, revision);
      await tx.run(
        'UPDATE traffic_configs SET attributes = ?, interim_attributes = ?, revision = ?, binding_since = ?, updated_at = ? WHERE id = ? AND tenant_id = ?',
        [
          JSON.stringify(attributes),
          interim === undefined ? null : JSON.stringify(interim),
          record.revision,
          JSON.stringify(record.bindingSince),
          record.updatedAt,
          record.id,
          tenantId,
        ],
      );
      await rewriteIndexes(tx, record);
      return record;
    });
  }

  /** Deletes a configuration of the tenant with its bindings, references and status; false (nothing changed) for any other id. */
  async delete(tenantId: string, id: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const owned = await tx.one('SELECT id FROM traffic_configs WHERE id = ? AND tenant_id = ?', [id, tenantId]);
      if (!owned) return false;
      await tx.run(`DELETE FROM frontend_bindings WHERE ${OWNED_CONFIG}`, [id, tenantId]);
      await tx.run(`DELETE FROM config_references WHERE ${OWNED_CONFIG}`, [id, tenantId]);
      await tx.run(`DELETE FROM edge_status WHERE ${OWNED_CONFIG}`, [id, tenantId]);
      const deleted = await tx.run('DELETE FROM traffic_configs WHERE id = ? AND tenant_id = ?', [id, tenantId]);
      if (deleted > 0) await bumpRevision(tx);
      return deleted > 0;
    });
  }

  async get(tenantId: string, id: string): Promise<TrafficConfigRecord | undefined> {
    const row = await this.db.one<Row>('SELECT * FROM traffic_configs WHERE id = ? AND tenant_id = ?', [id, tenantId]);
    return row && fromRow(row);
  }

  async list(tenantId: string): Promise<TrafficConfigRecord[]> {
    const rows = await this.db.all<Row>('SELECT * FROM traffic_configs WHERE tenant_id = ? ORDER BY created_at, id', [tenantId]);
    return rows.map(fromRow);
  }

  /** Every configuration of every tenant: what an edge node serves. */
  async listAll(): Promise<TrafficConfigRecord[]> {
    return (await this.db.all<Row>('SELECT * FROM traffic_configs ORDER BY created_at, id')).map(fromRow);
  }

  /** Configurations of the tenant that refer to a certificate or CA certificate. */
  async referencing(tenantId: string, refId: string): Promise<string[]> {
    const rows = await this.db.all<{ config_id: string }>(
      `SELECT DISTINCT r.config_id FROM config_references r JOIN traffic_configs c ON c.id = r.config_id
       WHERE r.ref_id = ? AND c.tenant_id = ? ORDER BY r.config_id`,
      [refId, tenantId],
    );
    return rows.map((row) => row.config_id);
  }
}

async function rewriteIndexes(tx: Queryable, record: TrafficConfigRecord): Promise<void> {
  await tx.run(`DELETE FROM frontend_bindings WHERE ${OWNED_CONFIG}`, [record.id, record.tenantId]);
  await tx.run(`DELETE FROM config_references WHERE ${OWNED_CONFIG}`, [record.id, record.tenantId]);
  await writeIndexes(tx, record);
}

/**
 * The ports a configuration holds and the certificates it refers to: those of its attributes and
 * of its interim attributes (served meanwhile), each once.
 */
async function writeIndexes(tx: Queryable, record: TrafficConfigRecord): Promise<void> {
  const served = record.interimAttributes ? [record.attributes, record.interimAttributes] : [record.attributes];
  for (const binding of heldBindings(record)) {
    try {
      await tx.run('INSERT INTO frontend_bindings (ip, port, protocol, config_id) VALUES (?, ?, ?, ?)', [
        binding.ip,
        binding.port,
        binding.protocol,
        record.id,
      ]);
    } catch (error) {
      if (!(error instanceof UniqueViolation)) throw error;
      throw new ConflictError(
        PORT_IN_USE,
        `port ${binding.port}/${binding.protocol} on ${binding.ip} is already assigned to another proxy`,
        '/data/attributes/frontend/port',
      );
    }
  }
  const references = new Map(
    served.flatMap((attributes) => configReferences(record.type, attributes)).map((ref) => [`${ref.kind}|${ref.id}`, ref]),
  );
  for (const ref of references.values()) {
    await tx.run('INSERT INTO config_references (config_id, ref_kind, ref_id) VALUES (?, ?, ?)', [record.id, ref.kind, ref.id]);
  }
}
