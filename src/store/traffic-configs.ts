import crypto from 'node:crypto';
import type { Db, Queryable } from './db.ts';
import { UniqueViolation } from './db.ts';
import { ConflictError } from './errors.ts';
import { bumpRevision } from './revision.ts';
import type { ProxyType, TrafficConfigAttributes, HttpProxyAttributes, L4ProxyAttributes } from '../api/schemas/traffic-config.ts';
import { HTTP_PROXY } from '../api/schemas/traffic-config.ts';
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
  createdAt: string;
  updatedAt: string;
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
  created_at: string;
  updated_at: string;
}

const fromRow = (row: Row): TrafficConfigRecord => ({
  id: row.id,
  tenantId: row.tenant_id,
  type: row.type as ProxyType,
  attributes: JSON.parse(row.attributes) as StoredAttributes,
  revision: Number(row.revision),
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

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

export const PORT_IN_USE = 'PORT_IN_USE';

export class TrafficConfigRepository {
  readonly db: Db;
  constructor(db: Db) {
    this.db = db;
  }

  async create(tenantId: string, type: ProxyType, attributes: StoredAttributes): Promise<TrafficConfigRecord> {
    return this.db.transaction(async (tx) => {
      const now = new Date().toISOString();
      const record: TrafficConfigRecord = {
        id: crypto.randomUUID(),
        tenantId,
        type,
        attributes,
        revision: await bumpRevision(tx),
        createdAt: now,
        updatedAt: now,
      };
      await tx.run(
        'INSERT INTO traffic_configs (id, tenant_id, type, attributes, revision, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
        [record.id, tenantId, type, JSON.stringify(attributes), record.revision, now, now],
      );
      await this.#writeIndexes(tx, record);
      return record;
    });
  }

  /** Replaces the attributes of a configuration (PUT, and PATCH after merging). */
  async replace(current: TrafficConfigRecord, attributes: StoredAttributes): Promise<TrafficConfigRecord> {
    return this.db.transaction(async (tx) => {
      const record: TrafficConfigRecord = {
        ...current,
        attributes,
        revision: await bumpRevision(tx),
        updatedAt: new Date().toISOString(),
      };
      const changed = await tx.run(
        'UPDATE traffic_configs SET attributes = ?, revision = ?, updated_at = ? WHERE id = ? AND tenant_id = ?',
        [JSON.stringify(attributes), record.revision, record.updatedAt, record.id, record.tenantId],
      );
      if (changed === 0) throw new ConflictError('CONCURRENT_DELETE', 'the traffic configuration was deleted meanwhile');
      await tx.run('DELETE FROM frontend_bindings WHERE config_id = ?', [record.id]);
      await tx.run('DELETE FROM config_references WHERE config_id = ?', [record.id]);
      await this.#writeIndexes(tx, record);
      return record;
    });
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      await tx.run('DELETE FROM frontend_bindings WHERE config_id = ?', [id]);
      await tx.run('DELETE FROM config_references WHERE config_id = ?', [id]);
      await tx.run('DELETE FROM edge_status WHERE config_id = ?', [id]);
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

  async #writeIndexes(tx: Queryable, record: TrafficConfigRecord): Promise<void> {
    for (const binding of frontendBindings(record.type, record.attributes)) {
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
    for (const ref of configReferences(record.type, record.attributes)) {
      await tx.run('INSERT INTO config_references (config_id, ref_kind, ref_id) VALUES (?, ?, ?)', [record.id, ref.kind, ref.id]);
    }
  }
}
