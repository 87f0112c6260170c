/**
 * From stored configurations to what a proxy needs in memory: certificates with their private keys
 * opened, CA certificates as PEM, and a version that changes with any of them.
 */
import crypto from 'node:crypto';
import type { Store } from '../../store/index.ts';
import { certificateKeyBinding, type SecretBox } from '../../certs/secret-box.ts';
import type { TrafficConfigRecord } from '../../store/traffic-configs.ts';
import type { HttpProxyAttributes, L4ProxyAttributes } from '@tps/model';
import type { ResolvedHttpProxy } from '../http/types.ts';
import type { ConfigEntry } from './messages.ts';

/** One CA entry's last good CRL (`crlPem` null while none was fetched), as the certificates service keeps it. */
export interface CrlRecordView {
  caCertificateId: string;
  entryIndex: number;
  crlPem: string | null;
  nextUpdate: string | null;
}

/** Looks up the CRLs of CA certificate ids (the certificates service keeps them fresh). */
export type CrlSource = (caCertificateIds: readonly string[]) => Promise<CrlRecordView[]>;

/** A resolved configuration, before the supervisor gives it its counter tables. */
export type ResolvedEntry = Omit<ConfigEntry, 'counters'>;

interface Material {
  certificatePem: string;
  privateKeyPem: string;
}

/** A configuration that cannot be served (yet): what its status says meanwhile. */
export interface Unresolved {
  id: string;
  unresolved: string;
  /** PROVISIONING while it waits for a certificate to be issued; ERROR when it cannot be served. */
  state: 'PROVISIONING' | 'ERROR';
}

/**
 * Resolves every configuration. An HTTP proxy whose front-end certificate is not issued yet (an
 * ACME certificate PENDING, or FAILED) is never served over the wrong scheme: it serves its interim
 * attributes (what it served before the PUT that named the certificate; the entry says so in
 * `interim`), or nothing (Unresolved) when it has none.
 */
export class ConfigResolver {
  readonly #store: Store;
  readonly #secrets: SecretBox;
  readonly #crls: CrlSource;
  /** Opened keys by certificate id and revision: a key is decrypted once, not on every reload. */
  readonly #materials = new Map<string, { revision: number; material: Material | undefined }>();

  constructor(store: Store, secrets: SecretBox, crls: CrlSource = (ids) => store.crlCache.list(ids)) {
    this.#store = store;
    this.#secrets = secrets;
    this.#crls = crls;
  }

  async resolve(record: TrafficConfigRecord, now = Date.now()): Promise<ResolvedEntry | Unresolved> {
    if (record.type === 'l4Proxy') {
      return {
        config: {
          type: 'l4Proxy',
          id: record.id,
          tenantId: record.tenantId,
          revision: record.revision,
          attributes: record.attributes as L4ProxyAttributes,
        },
        version: String(record.revision),
      };
    }
    const attributes = record.attributes as HttpProxyAttributes;
    const certificateId = attributes.frontend.certificateId ?? undefined;
    const waitingFor = certificateId === undefined ? undefined : await this.#store.certificates.get(record.tenantId, certificateId);
    if (certificateId === undefined || waitingFor?.status === 'ISSUED')
      return this.#resolveHttp(record, attributes, [String(record.revision)], now);

    const pending = waitingFor?.status === 'PENDING';
    const why = !waitingFor
      ? `certificate ${certificateId} does not exist`
      : pending
        ? `certificate ${certificateId} is not issued yet (PENDING)`
        : `certificate ${certificateId} is ${waitingFor.status}${waitingFor.statusDetail ? `: ${waitingFor.statusDetail}` : ''}`;
    if (!record.interimAttributes) return { id: record.id, unresolved: why, state: pending ? 'PROVISIONING' : 'ERROR' };
    // The previous configuration stays served (port 80 answering the HTTP-01 challenge, say); the
    // certificate's revision is part of the version, so its issuance reaches the workers.
    const versions = [String(record.revision), 'interim', `cert:${certificateId}@${waitingFor?.revision ?? 0}`];
    const interim = await this.#resolveHttp(record, record.interimAttributes as HttpProxyAttributes, versions, now);
    if ('unresolved' in interim) return interim;
    return {
      ...interim,
      interim: pending
        ? { state: 'PROVISIONING', detail: `${why}; the previous configuration is served until it is` }
        : { state: 'ERROR', detail: `${why}; the previous configuration is still served` },
    };
  }

  async #resolveHttp(
    record: TrafficConfigRecord,
    attributes: HttpProxyAttributes,
    versions: string[],
    now: number,
  ): Promise<ResolvedEntry | Unresolved> {
    const resolved: ResolvedHttpProxy = { id: record.id, tenantId: record.tenantId, revision: record.revision, attributes };
    const unresolved = (detail: string): Unresolved => ({ id: record.id, unresolved: detail, state: 'ERROR' });

    if (attributes.frontend.certificateId) {
      const material = await this.#material(record.tenantId, attributes.frontend.certificateId, versions);
      if (!material) return unresolved(`certificate ${attributes.frontend.certificateId} is not issued`);
      resolved.frontendCertificate = material;
    }
    const verification = attributes.frontend.clientCertificateVerification;
    let degraded: string | undefined;
    if (verification) {
      const caPems = await this.#caPems(record.tenantId, verification.caCertificateIds, versions);
      let crlPems: string[] = [];
      if (verification.verifyCrl) {
        const coverage = await this.#crlCoverage(record.tenantId, verification.caCertificateIds, now);
        crlPems = coverage.pems;
        if (coverage.gaps.length > 0) {
          degraded = `client certificates of ${coverage.gaps.join('; ')} are refused: verifyCrl needs a current CRL of every CA (fetched from its crlUrl; the CA certificate shows how the fetches go)`;
        }
        versions.push(`crl:${digest(crlPems.join(''))}`);
      }
      resolved.clientVerification = { mode: verification.mode, caPems, verifyCrl: verification.verifyCrl === true, crlPems };
    }
    const tls = attributes.backend.tlsSettings;
    if (tls) {
      if (tls.clientCertificateId) {
        const material = await this.#material(record.tenantId, tls.clientCertificateId, versions);
        if (!material) return unresolved(`certificate ${tls.clientCertificateId} is not available`);
        resolved.originClientCertificate = material;
      }
      const verify = tls.verifyCertificate;
      resolved.originTrust = !verify
        ? { mode: 'NONE' }
        : verify.mode === 'SYSTEM_TRUSTSTORE'
          ? { mode: 'SYSTEM_TRUSTSTORE' }
          : { mode: 'CUSTOM_TRUSTSTORE', caPems: await this.#caPems(record.tenantId, verify.caCertificateIds ?? [], versions) };
    }
    return { config: { type: 'httpProxy', ...resolved }, version: versions.join('/'), ...(degraded !== undefined && { degraded }) };
  }

  /**
   * The usable CRLs of these CA certificates, and the CA entries without one (described for the
   * status detail): no crlUrl, none fetched yet, or past its nextUpdate (OpenSSL refuses an expired
   * CRL too). Fetch errors are not repeated here: their text can say things about the network that
   * are the operator's business; the CA certificate resource shows the tenant what it may see.
   */
  async #crlCoverage(tenantId: string, ids: readonly string[], now: number): Promise<{ pems: string[]; gaps: string[] }> {
    const rows = await this.#crls(ids);
    const byEntry = new Map(rows.map((row) => [`${row.caCertificateId}|${row.entryIndex}`, row]));
    const pems: string[] = [];
    const gaps: string[] = [];
    for (const id of ids) {
      const record = await this.#store.caCertificates.get(tenantId, id);
      if (!record) continue;
      for (const [index, entry] of record.entries.entries()) {
        const name = `CA certificate ${id}${record.entries.length > 1 ? ` entry ${index}` : ''} (${entry.subject})`;
        const row = byEntry.get(`${id}|${index}`);
        if (!entry.crlUrl) gaps.push(`${name}: it has no crlUrl`);
        else if (!row?.crlPem) gaps.push(`${name}: no CRL has been fetched yet`);
        else if (row.nextUpdate !== null && Date.parse(row.nextUpdate) < now) gaps.push(`${name}: its CRL expired at ${row.nextUpdate}`);
        if (row?.crlPem) pems.push(row.crlPem);
      }
    }
    return { pems, gaps };
  }

  /** A certificate of the configuration's own tenant only: another tenant's id is as good as unknown. */
  async #material(tenantId: string, certificateId: string, versions: string[]): Promise<Material | undefined> {
    const record = await this.#store.certificates.get(tenantId, certificateId);
    if (!record) return undefined;
    versions.push(`cert:${record.id}@${record.revision}`);
    const cached = this.#materials.get(record.id);
    if (cached && cached.revision === record.revision) return cached.material;
    const material =
      record.status === 'ISSUED' && record.certificatePem && record.sealedPrivateKey
        ? {
            certificatePem: record.certificatePem + (record.chainPem ?? ''),
            privateKeyPem: this.#secrets.open(record.sealedPrivateKey, certificateKeyBinding(record)),
          }
        : undefined;
    this.#materials.set(record.id, { revision: record.revision, material });
    return material;
  }

  async #caPems(tenantId: string, ids: readonly string[], versions: string[]): Promise<string[]> {
    const pems: string[] = [];
    for (const id of ids) {
      const record = await this.#store.caCertificates.get(tenantId, id);
      if (!record) continue;
      versions.push(`ca:${id}@${record.updatedAt}`);
      pems.push(...record.entries.map((entry) => entry.certificate));
    }
    return pems;
  }
}

const digest = (text: string) => crypto.createHash('sha256').update(text).digest('hex').slice(0, 16);
